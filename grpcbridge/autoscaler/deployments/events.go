package deployments

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	"github.com/machinist-io/machinist/core/eventnote"
)

// eventRecorder emits the server's Warning Events (events.k8s.io, in the object's namespace):
// annotations of the Machine* objects it cannot use. Source.Start starts it before the
// informers, so their first pass is reported too.
type eventRecorder struct {
	broadcaster *eventnote.Broadcaster
	rec         events.EventRecorder
}

// reportingController names the server in its events.
const reportingController = "machinist.io/autoscaler"

func newEventRecorder(cfg *rest.Config, scheme *runtime.Scheme) (*eventRecorder, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("autoscaler: client for events: %w", err)
	}
	b := eventnote.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	return &eventRecorder{broadcaster: b, rec: b.Recorder(scheme, reportingController)}, nil
}

// start sends the events to the API server until ctx is done.
func (e *eventRecorder) start(ctx context.Context) error {
	if err := e.broadcaster.Start(ctx); err != nil {
		return fmt.Errorf("autoscaler: start recording events: %w", err)
	}
	return nil
}

// warn is index.warn: a Warning Event about obj.
func (e *eventRecorder) warn(obj runtime.Object, reason, message string) {
	e.rec.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Autoscale", "%s", message)
}
