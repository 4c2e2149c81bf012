package dialin_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/reflect/protoreflect"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/dialin/infragrpctest"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/grpcbridge/proto/infra"
	"github.com/machinist-io/machinist/internal/syncbuf"
)

// TestInfragrpcProtoNamesAndNumbers: the generated infra package has the 2018 design's package, service,
// methods (with their streaming), messages, field names, numbers, types and oneof of the 2018 design's
// infra.proto (gardener/machine-controller-manager branch grpc-driver, identical in
// ggaurav10/aws-driver-grpc pkg/grpc/infrapb/infra.proto).
func TestInfragrpcProtoNamesAndNumbers(t *testing.T) {
	fd := infra.File_infra_infra_proto
	if fd.Package() != "infra" || fd.Syntax() != protoreflect.Proto3 {
		t.Fatalf("package %s syntax %v", fd.Package(), fd.Syntax())
	}
	svc := fd.Services().ByName("Infragrpc")
	if svc == nil || svc.Methods().Len() != 3 {
		t.Fatal("service infra.Infragrpc with three methods missing")
	}
	for _, m := range []struct {
		name, in, out  string
		client, server bool
	}{
		{"Register", "infra.DriverSide", "infra.MCMside", true, true},
		{"GetMachineClass", "infra.MachineClassMeta", "infra.MachineClass", false, false},
		{"GetSecret", "infra.SecretMeta", "infra.Secret", false, false},
	} {
		md := svc.Methods().ByName(protoreflect.Name(m.name))
		if md == nil || string(md.Input().FullName()) != m.in || string(md.Output().FullName()) != m.out ||
			md.IsStreamingClient() != m.client || md.IsStreamingServer() != m.server {
			t.Errorf("method %s differs from the 2018 design's", m.name)
		}
	}
	if infra.Infragrpc_Register_FullMethodName != "/infra.Infragrpc/Register" {
		t.Errorf("full method name %s", infra.Infragrpc_Register_FullMethodName)
	}
	// message → field name → "number kind [message type] [oneof] [repeated]"
	want := map[string]map[string]string{
		"infra.MachineClassMeta":             {"name": "1 string", "revision": "2 int32"},
		"infra.SecretMeta":                   {"secretName": "1 string", "nameSpace": "2 string", "revision": "3 int32"},
		"infra.MachineClass":                 {"data": "1 string", "error": "2 string"},
		"infra.Secret":                       {"data": "1 string", "error": "2 string"},
		"infra.DriverSide":                   {"operationID": "1 int32", "operationType": "2 string", "registerResp": "3 message infra.DriverSide.registerationResp oneof=response", "createresponse": "4 message infra.DriverSide.createResp oneof=response", "deleteresponse": "5 message infra.DriverSide.deleteResp oneof=response", "listresponse": "6 message infra.DriverSide.listResp oneof=response"},
		"infra.DriverSide.registerationResp": {"name": "1 string", "group": "2 string", "kind": "3 string", "version": "4 string"},
		"infra.DriverSide.createResp":        {"providerID": "1 string", "nodename": "2 string", "error": "3 string"},
		"infra.DriverSide.deleteResp":        {"error": "1 string"},
		"infra.DriverSide.machine":           {"machineID": "1 string", "machineName": "2 string"},
		"infra.DriverSide.listResp":          {"list": "1 message infra.DriverSide.machine repeated", "error": "2 string"},
		"infra.MCMside":                      {"operationID": "1 int32", "operationType": "2 string", "operationparams": "3 message infra.MCMside.operationParams"},
		"infra.MCMside.operationParams":      {"machineClassMetaData": "1 message infra.MachineClassMeta", "credentials": "2 string", "machineID": "3 string", "machineName": "4 string"},
	}
	seen := 0
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			md := ms.Get(i)
			walk(md.Messages())
			fields, ok := want[string(md.FullName())]
			if !ok {
				t.Errorf("message %s is not in the 2018 design's proto", md.FullName())
				continue
			}
			seen++
			if md.Fields().Len() != len(fields) {
				t.Errorf("%s has %d fields, the 2018 design's %d", md.FullName(), md.Fields().Len(), len(fields))
			}
			for name, desc := range fields {
				f := md.Fields().ByName(protoreflect.Name(name))
				if f == nil {
					t.Errorf("%s.%s missing", md.FullName(), name)
					continue
				}
				got := []string{strconv.Itoa(int(f.Number())), f.Kind().String()}
				if f.Message() != nil {
					got = append(got, string(f.Message().FullName()))
				}
				if o := f.ContainingOneof(); o != nil {
					got = append(got, "oneof="+string(o.Name()))
				}
				if f.IsList() {
					got = append(got, "repeated")
				}
				if g := strings.Join(got, " "); g != desc {
					t.Errorf("%s.%s is %q, the 2018 design's %q", md.FullName(), name, g, desc)
				}
			}
		}
	}
	walk(fd.Messages())
	if seen != len(want) {
		t.Errorf("%d of the 2018 design's %d messages found", seen, len(want))
	}
}

func TestProviderForKind(t *testing.T) {
	for kind, want := range map[string]string{"AWSMachineClass": "aws", "OpenStackMachineClass": "openstack", "AzureMachineClass": "azure", "GCPMachineClass": "gcp", "AlicloudMachineClass": "alicloud"} {
		if got, err := dialin.ProviderForKind(kind); err != nil || got != want {
			t.Errorf("ProviderForKind(%s) = %q, %v; want %q", kind, got, err, want)
		}
	}
	for _, kind := range []string{"MachineClass", "AWSMachine", "", "AWS-MachineClass"} {
		if got, err := dialin.ProviderForKind(kind); err == nil {
			t.Errorf("ProviderForKind(%q) = %q, want an error", kind, got)
		}
	}
}

// infragrpcClient starts a 2018-protocol client serving p for kind over tr to addr until the test ends.
func infragrpcClient(t *testing.T, addr string, tr grpcbridge.Transport, kind string, p infragrpctest.Provider, retry time.Duration) *infragrpctest.Client {
	c, _ := infragrpcClientStop(t, addr, tr, kind, p, retry)
	return c
}

// infragrpcClientStop is infragrpcClient that also returns the client's Stop.
func infragrpcClientStop(t *testing.T, addr string, tr grpcbridge.Transport, kind string, p infragrpctest.Provider, retry time.Duration) (*infragrpctest.Client, func()) {
	t.Helper()
	creds := insecure.NewCredentials()
	if tr.TLS != nil {
		creds = credentials.NewTLS(tr.TLS)
	}
	c := &infragrpctest.Client{Addr: addr, DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(creds)},
		Kind: kind, Group: "machine.sapcloud.io", Version: "v1alpha1", Provider: p, Retry: retry}
	if a, ok := p.(*infragrpctest.AWS); ok {
		a.Data = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return c, stop
}

func awsClass(secret bool) *v1alpha1.MachineClass {
	c := &v1alpha1.MachineClass{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shoot--dev", Name: "aws-worker", ResourceVersion: "42", UID: "u-1", Labels: map[string]string{"pool": "a"}},
		Provider:   "AWS",
		ProviderSpec: runtime.RawExtension{Raw: []byte(`{"ami":"ami-0123","region":"eu-west-1","machineType":"m5.large",` +
			`"tags":{"kubernetes.io/cluster/shoot--dev":"1","kubernetes.io/role/node":"1","Name":"ignored"},"secretRef":{"name":"not-this","namespace":"x"}}`)},
	}
	if secret {
		c.SecretRef = &corev1.SecretReference{Namespace: "shoot--dev", Name: "aws-secret"}
	}
	return c
}

func awsSecret(userData string) *corev1.Secret {
	return &corev1.Secret{Data: map[string][]byte{
		infragrpctest.AccessKeyID: []byte("AKIA"), infragrpctest.SecretAccessKey: []byte("s3cr3t"), "userData": []byte(userData),
	}}
}

func machine(name, providerID string) *v1alpha1.Machine {
	m := fixture.Machine(name)
	m.Spec.ProviderID = providerID
	return m
}

// TestInfragrpcProvider: a provider speaking the 2018 protocol, registered with AWSMachineClass and
// a certificate that authorizes aws, serves create, list and delete of the aws provider through
// the same driver as a machinist provider would; it pulls the operation's class as an
// AWSMachineClass (providerSpec as spec, secretRef naming the operation's secret) and that
// secret as a core/v1 Secret; methods the 2018 design lacks are Unimplemented; errors keep MCM's code
// text. Pulls outside an operation, or by a peer not authorized for aws, get nothing.
func TestInfragrpcProvider(t *testing.T) {
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	cloud := &infragrpctest.AWS{}
	client := infragrpcClient(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "aws"), "AWSMachineClass", cloud, 0)
	waitFor(t, ctrl.Server, "aws", 1)
	remote, ok := ctrl.Server.Driver("AWS")
	if !ok {
		t.Fatal("no aws driver while the 2018-protocol provider is connected")
	}
	ctx := t.Context()
	class := awsClass(true)

	created, err := remote.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: class, Secret: awsSecret("#cloud-config m1")})
	if err != nil {
		t.Fatal(err)
	}
	if created.ProviderID != "aws:///eu-west-1/i-00000001" || created.NodeName != "ip-10-0-0-1.eu-west-1.compute.internal" {
		t.Fatalf("create answered %+v", created)
	}
	inst := cloud.Instances()
	if len(inst) != 1 || inst[0].Tags["Name"] != "m1" || inst[0].UserData != "#cloud-config m1" || inst[0].Type != "m5.large" {
		t.Fatalf("instances %+v", inst)
	}
	classes, secrets := cloud.Pulled()
	got := classes[0]
	if got.Kind != "AWSMachineClass" || got.APIVersion != "machine.sapcloud.io/v1alpha1" || got.Metadata.Name != "aws-worker" ||
		got.Metadata.Namespace != "shoot--dev" || got.Metadata.ResourceVersion != "42" || got.Metadata.Labels["pool"] != "a" || got.Spec.AMI != "ami-0123" {
		t.Fatalf("pulled class %+v", got)
	}
	if ref := got.Spec.SecretRef; ref == nil || ref.Namespace != "shoot--dev" || !strings.HasPrefix(ref.Name, "aws-secret.") {
		t.Fatalf("secretRef %+v does not name the operation's secret", got.Spec.SecretRef)
	}
	if s := secrets[0]; s.Kind != "Secret" || string(s.Data["userData"]) != "#cloud-config m1" || string(s.Data[infragrpctest.SecretAccessKey]) != "s3cr3t" {
		t.Fatalf("pulled secret %+v", s)
	}

	// Another machine with its own userData gets its own secret, not the first one's.
	if _, err := remote.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m2", ""), MachineClass: class, Secret: awsSecret("#cloud-config m2")}); err != nil {
		t.Fatal(err)
	}
	list, err := remote.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class, Secret: awsSecret("")})
	if err != nil || len(list.MachineList) != 2 || list.MachineList[created.ProviderID] != "m1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if cloud.Instances()[1].UserData != "#cloud-config m2" {
		t.Fatalf("second machine got userData %q", cloud.Instances()[1].UserData)
	}

	if _, err := remote.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("m1", created.ProviderID), MachineClass: class, Secret: awsSecret("")}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("never-made", ""), MachineClass: class, Secret: awsSecret("")}); err != nil {
		t.Fatalf("delete of a machine without provider ID: %v", err)
	}
	if inst := cloud.Instances(); len(inst) != 1 || inst[0].Tags["Name"] != "m2" {
		t.Fatalf("after deleting m1: %+v", inst)
	}

	for name, call := range map[string]func() error{
		"GetMachineStatus": func() error {
			_, err := remote.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m2", ""), MachineClass: class, Secret: awsSecret("")})
			return err
		},
		"InitializeMachine": func() error {
			_, err := remote.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: machine("m2", ""), MachineClass: class, Secret: awsSecret("")})
			return err
		},
		"GetVolumeIDs": func() error { _, err := remote.GetVolumeIDs(ctx, &driver.GetVolumeIDsRequest{}); return err },
	} {
		if err := call(); !driver.IsCode(err, driver.Unimplemented) {
			t.Errorf("%s: %v, want Unimplemented", name, err)
		}
	}

	// A provider error as plain text is Unknown; the message reaches the caller.
	_, err = remote.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m3", ""), MachineClass: class, Secret: &corev1.Secret{Data: map[string][]byte{"userData": []byte("x")}}})
	if !driver.IsCode(err, driver.Unknown) || !strings.Contains(err.Error(), "lacks providerAccessKeyId") {
		t.Fatalf("create without credentials: %v", err)
	}

	// Pulls of a class or secret no operation in flight references find nothing.
	meta := &infragrpctest.ClassMeta{Name: "/apis/machine.sapcloud.io/v1alpha1/namespaces/shoot--dev/machineclasses/aws-worker", Revision: 2}
	if _, err := client.GetMachineClass(meta); err == nil || !strings.Contains(err.Error(), "code = [NotFound]") {
		t.Fatalf("pull after the operation: %v", err)
	}
	if _, err := client.GetSecret(&infragrpctest.SecretMeta{SecretName: "aws-secret.2", SecretNameSpace: "shoot--dev"}); err == nil || !strings.Contains(err.Error(), "code = [NotFound]") {
		t.Fatalf("secret pull after the operation: %v", err)
	}
}

// blockingProvider answers create with MCM's code text, or holds a create until released.
type blockingProvider struct {
	infragrpctest.AWS
	arrived chan *infragrpctest.ClassMeta
	release chan struct{}
	errText string
}

func (b *blockingProvider) Create(class *infragrpctest.ClassMeta, credentials, machineID, name string) (string, string, error) {
	if b.errText != "" {
		return "", "", errorString(b.errText)
	}
	b.arrived <- class
	<-b.release
	return "aws:///r/i-1", "node-1", nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestInfragrpcErrorsAndPullAuthorization: MCM's code text from a 2018-protocol provider keeps its code; while
// an operation is in flight, a peer whose certificate does not authorize aws cannot pull its
// class or secret, the provider itself can.
func TestInfragrpcErrorsAndPullAuthorization(t *testing.T) {
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	p := &blockingProvider{arrived: make(chan *infragrpctest.ClassMeta, 1), release: make(chan struct{}), errText: "machine codes error: code = [ResourceExhausted] message = [InsufficientInstanceCapacity]"}
	infragrpcClient(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "aws"), "AWSMachineClass", p, 0)
	waitFor(t, ctrl.Server, "aws", 1)
	remote, _ := ctrl.Server.Driver("aws")
	ctx := t.Context()
	_, err := remote.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: awsClass(true), Secret: awsSecret("u")})
	if !driver.IsCode(err, driver.ResourceExhausted) || driver.MessageOf(err) != "InsufficientInstanceCapacity" {
		t.Fatalf("MCM code text: %v", err)
	}

	p.errText = ""
	done := make(chan error, 1)
	go func() {
		_, err := remote.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m2", ""), MachineClass: awsClass(true), Secret: awsSecret("u")})
		done <- err
	}()
	meta := <-p.arrived
	conn, err := grpcbridge.Dial(ctrl.Addr, fixture.ProviderCerts(t, certs, "openstack"))
	mustOK(t, err)
	defer conn.Close()
	other := infra.NewInfragrpcClient(conn)
	resp, err := other.GetMachineClass(ctx, &infra.MachineClassMeta{Name: meta.Name, Revision: meta.Revision})
	if err != nil || resp.Data != "" || !strings.Contains(resp.Error, "code = [PermissionDenied]") {
		t.Fatalf("a peer authorized for openstack pulled the aws class: %v %+v", err, resp)
	}
	secretName := "aws-secret." + strconv.Itoa(int(meta.Revision))
	sresp, err := other.GetSecret(ctx, &infra.SecretMeta{SecretName: secretName, NameSpace: "shoot--dev"})
	if err != nil || sresp.Data != "" || !strings.Contains(sresp.Error, "code = [PermissionDenied]") {
		t.Fatalf("a peer authorized for openstack pulled the aws secret: %v %+v", err, sresp)
	}
	own, err := grpcbridge.Dial(ctrl.Addr, fixture.ProviderCerts(t, certs, "aws"))
	mustOK(t, err)
	defer own.Close()
	sresp, err = infra.NewInfragrpcClient(own).GetSecret(ctx, &infra.SecretMeta{SecretName: secretName, NameSpace: "shoot--dev"})
	var sec corev1.Secret
	if err != nil || sresp.Error != "" || json.Unmarshal([]byte(sresp.Data), &sec) != nil || string(sec.Data["userData"]) != "u" {
		t.Fatalf("the aws provider could not pull its operation's secret: %v %+v", err, sresp)
	}
	close(p.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestInfragrpcRegistrationRules: a 2018-protocol provider is refused when its certificate does not authorize
// the provider its kind names, or when the kind names no provider; a plain-text client is
// refused by a controller serving mutual TLS, and accepted by one that chose plain text.
func TestInfragrpcRegistrationRules(t *testing.T) {
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	wrongCert := infragrpcClient(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "openstack"), "AWSMachineClass", &infragrpctest.AWS{}, 50*time.Millisecond)
	badKind := infragrpcClient(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "*"), "MachineClass", &infragrpctest.AWS{}, 50*time.Millisecond)
	plain := infragrpcClient(t, ctrl.Addr, grpcbridge.Transport{Insecure: true}, "AWSMachineClass", &infragrpctest.AWS{}, 50*time.Millisecond)
	deadline := time.Now().Add(20 * time.Second)
	for wrongCert.Attempts() < 3 || badKind.Attempts() < 3 || plain.Attempts() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("clients did not retry: %d %d %d", wrongCert.Attempts(), badKind.Attempts(), plain.Attempts())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := ctrl.Server.Providers(); len(n) != 0 {
		t.Fatalf("refused 2018-protocol providers registered: %v", n)
	}

	open := fixture.ServeController(t, dialin.Options{Insecure: true}, grpcbridge.Transport{Insecure: true})
	infragrpcClient(t, open.Addr, grpcbridge.Transport{Insecure: true}, "OpenStackMachineClass", &infragrpctest.AWS{}, 50*time.Millisecond)
	waitFor(t, open.Server, "openstack", 1)
}

// TestInfragrpcReconnects: when the stream is cut, the 2018-protocol client reconnects after its 5 s (the
// known client's fixed retry) and the provider serves again; an "unregister" ends the session
// at once.
func TestInfragrpcReconnects(t *testing.T) {
	certs := fixture.NewCerts(t)
	logs := &syncbuf.Buffer{}
	ctrl := fixture.ServeController(t, dialin.Options{Log: slog.New(slog.NewTextHandler(logs, nil))}, fixture.ServerTransport(t, certs))
	proxy := fixture.NewProxy(t, ctrl.Addr)
	cloud := &infragrpctest.AWS{}
	client := infragrpcClient(t, proxy.Addr, fixture.ProviderCerts(t, certs, "aws"), "AWSMachineClass", cloud, 0)
	waitFor(t, ctrl.Server, "aws", 1)
	proxy.Cut()
	deadline := time.Now().Add(30 * time.Second)
	for ctrl.Server.Providers()["aws"] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cut session stayed registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for client.Registrations() < 2 || ctrl.Server.Providers()["aws"] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no reconnection within 30 s (%d registrations)", client.Registrations())
		}
		time.Sleep(50 * time.Millisecond)
	}
	remote, _ := ctrl.Server.Driver("aws")
	if _, err := remote.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: awsClass(true), Secret: awsSecret("u")}); err != nil {
		t.Fatalf("after reconnecting: %v", err)
	}

	_, stop := infragrpcClientStop(t, ctrl.Addr, fixture.ProviderCerts(t, certs, "aws"), "AWSMachineClass", &infragrpctest.AWS{}, time.Hour)
	waitFor(t, ctrl.Server, "aws", 2)
	stop() // sends "unregister"
	for ctrl.Server.Providers()["aws"] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("an unregistered 2018-protocol provider stayed registered")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), `reason="the provider unregistered"`) {
		t.Fatalf("the session did not end by unregistering:\n%s", logs.String())
	}
}
