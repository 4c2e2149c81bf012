package grpcbridge_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
)

// TestEncoderClassVersions: a class is encoded once per UID and resourceVersion; a new version is
// encoded anew; a class without a version is encoded on every call.
func TestEncoderClassVersions(t *testing.T) {
	e := grpcbridge.NewEncoder()
	v1 := fixture.Class("openstack")
	first := mustEncode(t, e.MachineClass, v1)
	if want := must(grpcbridge.EncodeMachineClass(v1)); !bytes.Equal(first.Bytes, want) {
		t.Fatal("the encoder's bytes differ from EncodeMachineClass's")
	}
	// Another copy of the same version (the controller reads a fresh copy per reconcile).
	if again := mustEncode(t, e.MachineClass, v1.DeepCopy()); again != first {
		t.Fatal("the same class version was encoded again")
	}

	v2 := v1.DeepCopy()
	v2.ResourceVersion = "1700002"
	v2.ProviderSpec = runtime.RawExtension{Raw: []byte(`{"flavorName":"m1.large"}`)}
	second := mustEncode(t, e.MachineClass, v2)
	if !bytes.Equal(second.Bytes, must(grpcbridge.EncodeMachineClass(v2))) {
		t.Fatal("a new class version was sent with the old bytes")
	}
	if got := mustEncode(t, e.MachineClass, v1); got != first {
		t.Fatal("the first version was forgotten")
	}

	// Same name and resourceVersion, another UID: a class deleted and created again.
	recreated := v2.DeepCopy()
	recreated.UID = "c1a55000-0000-4000-8000-000000000002"
	recreated.ResourceVersion = v1.ResourceVersion
	if got := mustEncode(t, e.MachineClass, recreated); !bytes.Equal(got.Bytes, must(grpcbridge.EncodeMachineClass(recreated))) {
		t.Fatal("a recreated class was sent as the old one")
	}

	// No resourceVersion (a class from a file, or changed in memory): encoded every time, so an
	// edit between calls is sent.
	unversioned := v1.DeepCopy()
	unversioned.ResourceVersion = ""
	a := mustEncode(t, e.MachineClass, unversioned)
	unversioned.Provider = "other"
	b := mustEncode(t, e.MachineClass, unversioned)
	if a == b || bytes.Equal(a.Bytes, b.Bytes) || !bytes.Equal(b.Bytes, must(grpcbridge.EncodeMachineClass(unversioned))) {
		t.Fatal("an unversioned class was not encoded per call")
	}
	if got, err := e.MachineClass(nil); got != nil || err != nil {
		t.Fatalf("nil class: %v %v", got, err)
	}
}

// TestEncoderSecretContent: the secret a controller assembles (data only) is known by its content:
// equal data in another map shares the bytes, any change of a value, key, or nil-ness is encoded
// anew; a secret with anything besides data is encoded on every call.
func TestEncoderSecretContent(t *testing.T) {
	e := grpcbridge.NewEncoder()
	s := fixture.Secret()
	first := mustEncode(t, e.Secret, s)
	if !bytes.Equal(first.Bytes, must(grpcbridge.EncodeSecret(s))) {
		t.Fatal("the encoder's bytes differ from EncodeSecret's")
	}
	if again := mustEncode(t, e.Secret, s.DeepCopy()); again != first {
		t.Fatal("equal secret data was encoded again")
	}
	// The encoder keeps its own copy: changing the caller's map after a call changes nothing.
	s.Data["password"][0] = 'X'
	if got := mustEncode(t, e.Secret, fixture.Secret()); got != first {
		t.Fatal("the encoder's entry followed a change of the caller's data")
	}

	changes := map[string]func(*corev1.Secret){
		"value":       func(s *corev1.Secret) { s.Data["password"] = []byte("rotated") },
		"userData":    func(s *corev1.Secret) { s.Data["userData"] = append(s.Data["userData"], '\n') },
		"new key":     func(s *corev1.Secret) { s.Data["domainID"] = []byte("d-1") },
		"key removed": func(s *corev1.Secret) { delete(s.Data, "domainName") },
		"key renamed": func(s *corev1.Secret) { s.Data["tenantID"] = s.Data["tenantName"]; delete(s.Data, "tenantName") },
		"empty value": func(s *corev1.Secret) { s.Data["extra"] = []byte{} },
		"nil value":   func(s *corev1.Secret) { s.Data["extra"] = nil },
		"name":        func(s *corev1.Secret) { s.Name = "cloudprovider" },
		"type":        func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque },
		"stringData":  func(s *corev1.Secret) { s.StringData = map[string]string{"a": "b"} },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			changed := fixture.Secret()
			change(changed)
			got := mustEncode(t, e.Secret, changed)
			if got == first || !bytes.Equal(got.Bytes, must(grpcbridge.EncodeSecret(changed))) {
				t.Fatal("a changed secret was sent with the old bytes")
			}
		})
	}
	// nil and empty values encode apart and stay apart.
	empty, null := fixture.Secret(), fixture.Secret()
	empty.Data["extra"], null.Data["extra"] = []byte{}, nil
	if bytes.Equal(mustEncode(t, e.Secret, empty).Bytes, mustEncode(t, e.Secret, null).Bytes) {
		t.Fatal("nil and empty values share an encoding")
	}
	if got, err := e.Secret(nil); got != nil || err != nil {
		t.Fatalf("nil secret: %v %v", got, err)
	}
}

// TestNoStaleClassOrSecret: through the bridge, a driver always receives the class and secret of
// the call, however many calls came before with other versions.
func TestNoStaleClassOrSecret(t *testing.T) {
	var mu sync.Mutex
	var got []*driver.GetMachineStatusRequest
	d := &fixture.FuncDriver{Handle: func(_ context.Context, _ string, req any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, req.(*driver.GetMachineStatusRequest))
		return &driver.GetMachineStatusResponse{}, nil
	}}
	client := fixture.ServeUnix(t, d).Client
	class, secret := fixture.Class("mem"), fixture.Secret()
	next := func(c *v1alpha1.MachineClass, s *corev1.Secret) *driver.GetMachineStatusRequest {
		t.Helper()
		if _, err := client.GetMachineStatus(t.Context(), &driver.GetMachineStatusRequest{Machine: fixture.Machine("m-1"), MachineClass: c, Secret: s}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return got[len(got)-1]
	}
	for range 3 {
		next(class, secret)
	}
	class.ResourceVersion = "1700002"
	class.ProviderSpec = runtime.RawExtension{Raw: []byte(`{"flavorName":"m1.large"}`)}
	if r := next(class, secret); string(r.MachineClass.ProviderSpec.Raw) != `{"flavorName":"m1.large"}` || r.MachineClass.ResourceVersion != "1700002" {
		t.Fatalf("the driver received a stale class: %s at %s", r.MachineClass.ProviderSpec.Raw, r.MachineClass.ResourceVersion)
	}
	secret.Data["password"] = []byte("rotated")
	if r := next(class, secret); string(r.Secret.Data["password"]) != "rotated" {
		t.Fatal("the driver received a stale secret")
	}
	// Back to an earlier content: that version again.
	if r := next(fixture.Class("mem"), fixture.Secret()); r.MachineClass.ResourceVersion != "1700001" || string(r.Secret.Data["password"]) != "s3cr3t-Passw0rd" {
		t.Fatal("the driver did not receive the earlier version")
	}
}

// TestMachineChangedInMemoryArrives reproduces the Machine controller's stale-node probe
// (rejectStaleNode): the machine goes out twice as read, then as a copy with another providerID
// and the same resourceVersion. The server hands both calls of the version it has decoded the
// same object (drivers only read it), and the probe arrives as the caller changed it.
func TestMachineChangedInMemoryArrives(t *testing.T) {
	var mu sync.Mutex
	var got []*v1alpha1.Machine
	d := &fixture.FuncDriver{Handle: func(_ context.Context, method string, req any) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		switch r := req.(type) {
		case *driver.GetMachineStatusRequest:
			got = append(got, r.Machine)
			return &driver.GetMachineStatusResponse{}, nil
		case *driver.CreateMachineRequest:
			got = append(got, r.Machine)
			return &driver.CreateMachineResponse{ProviderID: "mem:///new-vm", NodeName: r.Machine.Name}, nil
		case *driver.DeleteMachineRequest:
			got = append(got, r.Machine)
			return &driver.DeleteMachineResponse{}, nil
		}
		return nil, driver.Errorf(driver.Unimplemented, "%s", method)
	}}
	client := fixture.ServeUnix(t, d).Client
	m, class, secret := fixture.Machine("m-1"), fixture.Class("mem"), fixture.Secret()
	if _, err := client.GetMachineStatus(t.Context(), &driver.GetMachineStatusRequest{Machine: m, MachineClass: class, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	created, err := client.CreateMachine(t.Context(), &driver.CreateMachineRequest{Machine: m, MachineClass: class, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	probe := m.DeepCopy()
	probe.Spec.ProviderID = created.ProviderID
	if _, err := client.DeleteMachine(t.Context(), &driver.DeleteMachineRequest{Machine: probe, MachineClass: class, Secret: secret}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("the driver received %d calls, want 3", len(got))
	}
	if got[0] != got[1] {
		t.Error("two calls of one machine version received different decoded objects; the server's Decoder should hand the one it has")
	}
	if got[1].Spec.ProviderID != m.Spec.ProviderID {
		t.Errorf("CreateMachine received providerID %q, want the machine's %q", got[1].Spec.ProviderID, m.Spec.ProviderID)
	}
	if got[2].Spec.ProviderID != "mem:///new-vm" || got[2].ResourceVersion != m.ResourceVersion {
		t.Errorf("the probe arrived with providerID %q at resourceVersion %s, want %q at %s", got[2].Spec.ProviderID, got[2].ResourceVersion, "mem:///new-vm", m.ResourceVersion)
	}
}

func mustEncode[T any](t *testing.T, enc func(T) (*grpcbridge.Encoded, error), obj T) *grpcbridge.Encoded {
	t.Helper()
	e, err := enc(obj)
	if err != nil || e == nil {
		t.Fatalf("encode: %v %v", e, err)
	}
	return e
}

// BenchmarkEncoderHit is the client's per-call cost of a class and secret already encoded: the
// class by UID and resourceVersion, the secret by a hash of its data and a comparison with it.
func BenchmarkEncoderHit(b *testing.B) {
	e := grpcbridge.NewEncoder()
	c, s := fixture.Class("openstack"), fixture.Secret()
	b.Run("class", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.MachineClass(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("secret", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Secret(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
