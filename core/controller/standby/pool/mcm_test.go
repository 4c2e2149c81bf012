package pool_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/standby"
	"github.com/machinist-io/machinist/core/controller/standby/pool"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/core/registry"
	"github.com/machinist-io/machinist/harness/ctrltest"
	"github.com/machinist-io/machinist/harness/localcontrolplane"
	"github.com/machinist-io/machinist/harness/testenv"
	"github.com/machinist-io/machinist/harness/testenv/mcmcrds"
	"github.com/machinist-io/machinist/internal/syncbuf"
)

// warnings records the API server's warnings (299 headers) the controller receives.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code == 299 {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.text = append(w.text, text)
	}
}

func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.text...)
}

// Under CRDs shaped like Gardener MCM's the server prunes the counts: the pool sends them once,
// logs once what that means, and from then on writes only its condition, so its writes bring no
// repeated "unknown field" warning while the condition still follows the pool.
func TestCountsUnderMCMCRDsAreDroppedOnce(t *testing.T) {
	root, err := localcontrolplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := mcmcrds.Write(filepath.Join(root, "kubernetes", "crds"), dir); err != nil {
		t.Fatal(err)
	}
	srv := testenv.Start(t, testenv.WithCRDDirs(dir))
	cfg := rest.CopyConfig(srv.Config)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e := &ctrltest.Env{T: t, NS: "mcm-shaped", Config: cfg, C: c, Drivers: &ctrltest.Drivers{}}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.NS}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.StopControllers)
	warned := &warnings{}
	e.ControllerConfig = rest.CopyConfig(cfg)
	e.ControllerConfig.WarningHandlerWithContext = warned
	logs := &syncbuf.Buffer{}

	e.Drivers.Set(memdriver.ProviderName, memdriver.New(memdriver.NewCloud()))
	e.Class("small", memdriver.ProviderName, map[string]any{}, "")
	_, ms := deployment(e, "small", "2", "h1")
	e.StartManager(func(mgr crmanager.Manager) error {
		return pool.Setup(mgr, pool.Options{Drivers: &registry.Resolver{Endpoints: e.Drivers}, Log: slog.New(slog.NewTextHandler(logs, nil))})
	})

	got := waitPool(e, "two standby machines", func(ms []v1alpha1.Machine) bool { return len(ms) == 2 })
	waitCondition(e, v1alpha1.ConditionFalse, pool.ReasonFilling)
	setState(e, got[0].Name, standby.Stopped)
	setState(e, got[1].Name, standby.Stopped)
	waitCondition(e, v1alpha1.ConditionTrue, pool.ReasonReady)
	m := &v1alpha1.Machine{}
	if err := e.C.Get(context.Background(), e.Key(got[0].Name), m); err != nil {
		t.Fatal(err)
	}
	if err := e.C.Update(context.Background(), standby.Claim(m, ms)); err != nil {
		t.Fatal(err)
	}
	c0 := waitCondition(e, v1alpha1.ConditionFalse, pool.ReasonFilling)
	if c0.Message != "1 of 2 standby machines stopped, 1 booting or stopping" {
		t.Errorf("condition message %q", c0.Message)
	}

	md := &v1alpha1.MachineDeployment{}
	if err := e.C.Get(context.Background(), e.Key("web"), md); err != nil {
		t.Fatal(err)
	}
	if md.Status.StandbyReady != 0 || md.Status.StandbyStarting != 0 {
		t.Errorf("standbyReady %d, standbyStarting %d stored under MCM's CRD, which has no such fields", md.Status.StandbyReady, md.Status.StandbyStarting)
	}
	// Several status writes happened (filling, ready, filling again): only the first sent the counts.
	perText := map[string]int{}
	for _, w := range warned.all() {
		perText[w]++
	}
	if len(perText) == 0 {
		t.Error("no API warning: the counts were never sent, so the test proves nothing")
	}
	for text, n := range perText {
		if n > 1 {
			t.Errorf("API warning %q came %d times: the counts are sent again", text, n)
		}
		if !strings.Contains(text, "standby") {
			t.Errorf("API warning %q is not about the counts", text)
		}
	}
	if n := strings.Count(logs.String(), "status.standbyReady and status.standbyStarting is missing"); n != 1 {
		t.Errorf("the pruned counts were logged %d times; want once:\n%s", n, logs.String())
	}
}
