package machine

import (
	"context"
	"log/slog"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// refreshAfter: an unchanged lastOperation is rewritten (with a new lastUpdateTime) only when it
// is older than this, so a long-standing error still shows that it is current.
const refreshAfter = 30 * time.Minute

func (r *deps) log(m *v1alpha1.Machine) *slog.Logger {
	return r.opts.Log.With("machine", m.Namespace+"/"+m.Name)
}

// writeStatus writes st as m's status unless it means the same as what m already has, so
// reconciles that learn nothing new cost no API write. The phase's lastUpdateTime changes only
// with the phase (the health timeout counts from it); lastOperation's only when the operation
// changed — descriptions that differ only in request IDs, UUIDs or numbers count as unchanged.
// On success m holds the written object.
func (r *deps) writeStatus(ctx context.Context, m *v1alpha1.Machine, st v1alpha1.MachineStatus) error {
	now := metav1.NewTime(r.now())
	old := m.Status
	if st.CurrentStatus.Phase != old.CurrentStatus.Phase || st.CurrentStatus.LastUpdateTime.IsZero() {
		st.CurrentStatus.LastUpdateTime = now
	}
	if sameOperation(old.LastOperation, st.LastOperation) && since(now.Time, old.LastOperation.LastUpdateTime) < refreshAfter {
		st.LastOperation = old.LastOperation
	} else {
		st.LastOperation.LastUpdateTime = now
	}
	if equality.Semantic.DeepEqual(old, st) {
		return nil
	}
	updated := m.DeepCopy()
	updated.Status = st
	if err := r.client.Status().Update(ctx, updated); err != nil {
		return err
	}
	*m = *updated
	return nil
}

// volatile matches the parts of cloud messages that change from one attempt to the next.
var volatile = regexp.MustCompile(`(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|req-[0-9a-z-]+|\b[0-9a-f]{16,}\b|[0-9]+`)

// sameOperation reports whether two last operations say the same: same type, state and code,
// and descriptions equal once volatile tokens (request IDs, UUIDs, numbers) are masked.
func sameOperation(a, b v1alpha1.LastOperation) bool {
	if a.Type != b.Type || a.State != b.State || a.ErrorCode != b.ErrorCode {
		return false
	}
	if a.Description == b.Description {
		return true
	}
	return volatile.ReplaceAllString(a.Description, "#") == volatile.ReplaceAllString(b.Description, "#")
}
