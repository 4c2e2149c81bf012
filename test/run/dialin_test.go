package run

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/dialin/infragrpctest"
	"github.com/machinist-io/machinist/grpcbridge/mtls"
	"github.com/machinist-io/machinist/grpcbridge/mtls/mtlstest"
	"github.com/machinist-io/machinist/internal/eventually"
)

// dialinController starts `machinist run --dialin-listen` with mutual TLS and returns the
// address and a function issuing provider client certificates authorizing a name.
func (e *e2e) dialinController(extra ...string) (addr string, issue func(name string) mtls.Files, stop func()) {
	e.t.Helper()
	addr = fmt.Sprintf("127.0.0.1:%d", freeTCPPort(e.t))
	ca := mtlstest.NewCA(e.t, "machinist test CA")
	server := ca.IssueFiles(e.t, mtlstest.Leaf{CommonName: "machinist-controller"}, ca.PEM)
	stop = e.startRun(append([]string{"--target-kubeconfig", "none", "--dialin-listen", addr, "--driver-cert", server.Cert, "--driver-key", server.Key, "--driver-cacert", server.CA}, extra...)...)
	return addr, func(name string) mtls.Files {
		return ca.IssueFiles(e.t, mtlstest.Leaf{CommonName: "provider-" + name, URIs: []string{mtls.ProviderURI(name).String()}}, ca.PEM)
	}, stop
}

// TestRunInfragrpcProvider: a provider built against the 2018 design (a client of
// infra.Infragrpc behaving like the 2018 design's known client, serving an AWS-like cloud) dials in to
// `machinist run`; a MachineDeployment of an AWS class on the real API server gets Available
// machines with one instance each, named after the machine and carrying its userData, and
// scaling to zero deletes the instances.
func TestRunInfragrpcProvider(t *testing.T) {
	e := newE2E(t)
	// The binary has an aws driver compiled in, which comes before dialled-in providers: send
	// aws's operations to the provider that dials in, as an operator replacing it would.
	addr, issue, _ := e.dialinController("--prefer-dialin", "aws")
	cfg, err := mtls.ClientConfig(issue("aws"), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	client, cloud := e.infragrpcProvider(addr, cfg)
	eventually.Explained(e.t, 60*time.Second, "the 2018-protocol provider registered", func() (bool, string) { return client.Connected(), "not connected" })

	e.seedEraAWSClass()
	e.newDeployment("default", "infragrpc", "aws", 2, 1, 0)
	e.waitInstancesOfMachines(cloud, 2)
	e.updateDeployment("default", "infragrpc", func(d *v1alpha1.MachineDeployment) { d.Spec.Replicas = 0 })
	eventually.Explained(e.t, 90*time.Second, "the instances deleted", func() (bool, string) {
		return len(cloud.Instances()) == 0 && len(e.machines("default")) == 0, fmt.Sprintf("instances %v", cloud.Instances())
	})
}

// infragrpcProvider runs a provider of the 2018 design (infragrpctest's client with its AWS-like
// cloud) dialling in to addr with cfg until the test ends.
func (e *e2e) infragrpcProvider(addr string, cfg *tls.Config) (*infragrpctest.Client, *infragrpctest.AWS) {
	cloud := &infragrpctest.AWS{}
	client := &infragrpctest.Client{Addr: addr, DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))},
		Kind: "AWSMachineClass", Group: "machine.sapcloud.io", Version: "v1alpha1", Provider: cloud}
	cloud.Data = client
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); client.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return client, cloud
}

// seedEraAWSClass creates class default/aws as a seed of the 2018 design has it: provider AWS,
// a spec the 2018 sample driver reads (which machinist's compiled-in aws driver refuses:
// InvalidArgument, no networkInterfaces, iam or blockDevices), and its secret with userData.
func (e *e2e) seedEraAWSClass() {
	e.t.Helper()
	bg := context.Background()
	if err := e.c.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "aws"},
		StringData: map[string]string{"userData": "#cloud-config for " + v1alpha1.UserDataMachineNamePlaceholder, infragrpctest.AccessKeyID: "AKIA", infragrpctest.SecretAccessKey: "s3cr3t"}}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.c.Create(bg, &v1alpha1.MachineClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "aws"},
		Provider:   "AWS",
		ProviderSpec: runtimeRaw(`{"ami":"ami-0123","region":"eu-west-1","machineType":"m5.large",` +
			`"tags":{"kubernetes.io/cluster/e2e":"1","kubernetes.io/role/node":"1"}}`),
		SecretRef: &corev1.SecretReference{Namespace: "default", Name: "aws"},
	}); err != nil {
		e.t.Fatal(err)
	}
}

// waitInstancesOfMachines waits for n Available machines in default and checks that each has an
// instance of the 2018-protocol provider's cloud, named after it, with its rendered userData.
func (e *e2e) waitInstancesOfMachines(cloud *infragrpctest.AWS, n int) {
	e.t.Helper()
	eventually.Explained(e.t, 90*time.Second, fmt.Sprintf("%d Available machines", n), func() (bool, string) {
		ph, _ := e.phases("default", nil)
		return ph[v1alpha1.MachineAvailable] == n && len(e.machines("default")) == n, fmt.Sprintf("phases %v", ph)
	})
	byName := map[string]infragrpctest.Instance{}
	for _, i := range cloud.Instances() {
		byName[i.Tags["Name"]] = i
	}
	if len(byName) != n {
		e.t.Fatalf("the 2018-protocol provider's cloud holds %v, want one instance per machine", cloud.Instances())
	}
	for _, m := range e.machines("default") {
		i, ok := byName[m.Name]
		if !ok || m.Spec.ProviderID != "aws:///eu-west-1/"+i.ID || i.UserData != "#cloud-config for "+m.Name {
			e.t.Errorf("machine %s (providerID %s) has instance %+v", m.Name, m.Spec.ProviderID, i)
		}
	}
}

// TestRunPreferDialinGrace: issue 33's start-up, tried as a new user would: a MachineDeployment
// of a seed-era AWS class is applied, then the controller (with aws compiled in, --prefer-dialin
// aws) and the 2018-design provider dialling in as aws start together. The preferred provider's
// grace period keeps the compiled-in driver, which refuses that spec, from taking the machines
// while the provider connects (it retries every 5 s): every machine is created by the dialled-in
// provider and no creation failed on the way. (The grace is long here so the test waits for the
// connection, not for a clock; its default is docs/grpc-bridge.md's.)
func TestRunPreferDialinGrace(t *testing.T) {
	e := newE2E(t)
	e.seedEraAWSClass()
	e.newDeployment("default", "grace", "aws", 2, 1, 0)
	addr, issue, _ := e.dialinController("--prefer-dialin", "aws", "--prefer-dialin-grace", "10m")
	cfg, err := mtls.ClientConfig(issue("aws"), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	_, cloud := e.infragrpcProvider(addr, cfg)
	e.waitInstancesOfMachines(cloud, 2)
	if logs := e.logs.String(); strings.Contains(logs, "machine creation failed") {
		t.Errorf("a creation failed before the dialled-in provider served it:\n%s", logs)
	}
}

// TestRunPreferDialin: a provider that dials in under the name of a compiled-in provider gets no
// work by default, and `run` says so (a warning naming the flag, a metric); with
// --prefer-dialin=NAME its machines go to the dialled-in provider.
func TestRunPreferDialin(t *testing.T) {
	e := newE2E(t)
	connect := func(addr string, files mtls.Files) (*dialin.Connector, *memdriver.Cloud) {
		cfg, err := mtls.ClientConfig(files, "localhost")
		if err != nil {
			t.Fatal(err)
		}
		cloud := memdriver.NewCloud()
		p, err := dialin.NewConnector(dialin.ConnectorOptions{Controller: addr, Transport: grpcbridge.Transport{TLS: cfg},
			Drivers: map[string]driver.Driver{"local": memAsLocal{memdriver.New(cloud)}}, Log: slog.New(slog.NewTextHandler(e.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done; _ = p.Close() })
		eventually.Explained(e.t, 60*time.Second, "the provider connected", func() (bool, string) { return p.Connected(), "not connected" })
		return p, cloud
	}

	addr, issue, stop := e.dialinController()
	connect(addr, issue("local"))
	eventually.Explained(e.t, 30*time.Second, "the shadow warning and metric", func() (bool, string) {
		logs := e.logs.String()
		if !strings.Contains(logs, "provider local registered but gets no operations: the compiled-in driver of that name serves them") || !strings.Contains(logs, "--prefer-dialin=local") {
			return false, "no warning in the log"
		}
		m := e.scrape()
		return strings.Contains(m, `machinist_dialin_provider_shadowed{provider="local",shadowed_by="compiled-in driver"} 1`) &&
			strings.Contains(m, `machinist_dialin_provider_replicas{provider="local"} 1`), "metrics:\n" + m
	})
	stop()

	addr, issue, _ = e.dialinController("--prefer-dialin", "local")
	_, cloud := connect(addr, issue("local"))
	if err := e.c.Create(context.Background(), &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Namespace: "default", Name: "remote-local"},
		Provider:     "local",
		ProviderSpec: runtimeRaw(`{"cluster":"e2e","role":"worker"}`),
	}); err != nil {
		t.Fatal(err)
	}
	e.newDeployment("default", "preferred", "remote-local", 1, 1, 0)
	eventually.Explained(e.t, 60*time.Second, "an Available machine", func() (bool, string) {
		ph, _ := e.phases("default", nil)
		return ph[v1alpha1.MachineAvailable] == 1, fmt.Sprintf("phases %v", ph)
	})
	// The compiled-in local driver would have made a local VM with its own provider ID; the
	// machine records the dialled-in provider's VM instead.
	ms := e.machines("default")
	if n := len(cloud.VMs()); n != 1 || len(ms) != 1 || cloud.Count(ms[0].Name) != 1 {
		t.Fatalf("the dialled-in provider's cloud holds %v for machines %d, want the machine's VM", cloud.VMs(), len(ms))
	}
	if id := ms[0].Spec.ProviderID; !strings.HasPrefix(id, "mem://") || !strings.HasSuffix(id, "/"+cloud.VMs()[0].ID) {
		t.Errorf("machine %s records provider ID %q, not the dialled-in provider's VM %v", ms[0].Name, ms[0].Spec.ProviderID, cloud.VMs())
	}
	if m := e.scrape(); strings.Contains(m, "machinist_dialin_provider_shadowed{") {
		t.Errorf("a preferred provider is reported as shadowed:\n%s", m)
	}
}

// scrape returns the controller's /metrics.
func (e *e2e) scrape() string {
	e.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", e.port))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// memAsLocal is the mem driver serving classes of provider local (a stand-in for a local
// provider running elsewhere).
type memAsLocal struct{ driver.Driver }

func asMem(c *v1alpha1.MachineClass) *v1alpha1.MachineClass {
	if c != nil {
		c.Provider = memdriver.ProviderName
	}
	return c
}

func (d memAsLocal) CreateMachine(ctx context.Context, r *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	r.MachineClass = asMem(r.MachineClass)
	return d.Driver.CreateMachine(ctx, r)
}

func (d memAsLocal) InitializeMachine(ctx context.Context, r *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	r.MachineClass = asMem(r.MachineClass)
	return d.Driver.InitializeMachine(ctx, r)
}

func (d memAsLocal) DeleteMachine(ctx context.Context, r *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	r.MachineClass = asMem(r.MachineClass)
	return d.Driver.DeleteMachine(ctx, r)
}

func (d memAsLocal) GetMachineStatus(ctx context.Context, r *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	r.MachineClass = asMem(r.MachineClass)
	return d.Driver.GetMachineStatus(ctx, r)
}

func (d memAsLocal) ListMachines(ctx context.Context, r *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	r.MachineClass = asMem(r.MachineClass)
	return d.Driver.ListMachines(ctx, r)
}
