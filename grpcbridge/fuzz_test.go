package grpcbridge_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// Fuzz targets for the conversions. Seeds live in testdata/fuzz/<target>/ (regenerate the
// request seeds with MACHINIST_WRITE_FUZZ_SEEDS=1 go test -run TestWriteFuzzSeeds); run one with
//
//	go test -run x -fuzz FuzzDecodeRequest -fuzztime 60s ./grpcbridge/

// FuzzDecodeRequest feeds arbitrary bytes to the server's decoding: it must never panic, must
// refuse what it cannot decode with InvalidArgument, and what it accepts must survive another
// round trip unchanged.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x03, 0x1a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req driverv1.CreateMachineRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		m, err := grpcbridge.DecodeMachine(req.Machine)
		if err != nil {
			mustInvalid(t, err)
			return
		}
		c, err := grpcbridge.DecodeMachineClass(req.MachineClass)
		if err != nil {
			mustInvalid(t, err)
			return
		}
		s, err := grpcbridge.DecodeSecret(req.Secret)
		if err != nil {
			mustInvalid(t, err)
			return
		}
		if m != nil {
			mustEqualF(t, "machine", m, wireMachine(t, m))
		}
		if c != nil {
			mustEqualF(t, "class", c, wireClass(t, c))
		}
		if s != nil {
			mustEqualF(t, "secret", s, wireSecret(t, s))
		}
		var vreq driverv1.GetVolumeIDsRequest
		if proto.Unmarshal(data, &vreq) == nil {
			if _, err := grpcbridge.PVSpecsFromProto(vreq.PvSpecs); err != nil {
				mustInvalid(t, err)
			}
		}
	})
}

// FuzzObjectRoundTrip builds objects from fuzzed strings and bytes (and a seed for every other
// field) and requires them back unchanged.
func FuzzObjectRoundTrip(f *testing.F) {
	f.Add(int64(1), "m-1", "shoot--dev", `{"flavor":"m1.small"}`, []byte("#cloud-config\n"), "OpenStack")
	f.Add(int64(2), "", "", "", []byte(nil), "")
	f.Add(int64(3), "ü\x00ñ", "ns\xff", "not json", []byte{0, 1, 2, 255}, "azure")
	f.Fuzz(func(t *testing.T, seed int64, name, namespace, providerSpec string, userData []byte, provider string) {
		fill := objectFiller(t, seed)
		var m v1alpha1.Machine
		var c v1alpha1.MachineClass
		fill.Fill(&m)
		fill.Fill(&c)
		// A class's status is the controller's own record (the ProviderSpecValid condition); the
		// bridge does not carry it to drivers, as MCM's driver contract has no class status.
		c.Status = v1alpha1.MachineClassStatus{}
		m.Name, m.Namespace, m.Status.LastKnownState = name, namespace, providerSpec
		c.Name, c.Provider = name, provider
		c.ProviderSpec = runtime.RawExtension{Raw: []byte(providerSpec)}
		if providerSpec == "" {
			c.ProviderSpec.Raw = nil
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"userData": userData, name: userData}}
		mustEqualF(t, "machine", &m, wireMachine(t, &m))
		mustEqualF(t, "class", &c, wireClass(t, &c))
		mustEqualF(t, "secret", s, wireSecret(t, s))
	})
}

func mustInvalid(t *testing.T, err error) {
	t.Helper()
	if !driver.IsCode(err, driver.InvalidArgument) {
		t.Fatalf("undecodable input gave %v, want InvalidArgument", err)
	}
}

func mustEqualF(t *testing.T, what string, want, got any) {
	t.Helper()
	if !equality.Semantic.DeepEqual(want, got) {
		t.Fatalf("%s changed on a second round trip", what)
	}
}

// TestWriteFuzzSeeds writes encoded realistic requests as seeds of FuzzDecodeRequest.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MACHINIST_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MACHINIST_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz seeds")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeRequest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fill := objectFiller(t, 42)
	for i := range 4 {
		m, c, s := fixture.Machine(fmt.Sprintf("m-%d", i)), fixture.Class("openstack"), fixture.Secret()
		if i > 0 {
			m, c, s = &v1alpha1.Machine{}, &v1alpha1.MachineClass{}, &corev1.Secret{}
			fill.Fill(m)
			fill.Fill(c)
			fill.Fill(s)
		}
		pm, _ := grpcbridge.EncodeMachine(m)
		pc, _ := grpcbridge.EncodeMachineClass(c)
		ps, _ := grpcbridge.EncodeSecret(s)
		b, err := proto.Marshal(&driverv1.CreateMachineRequest{Machine: pm, MachineClass: pc, Secret: ps})
		if err != nil {
			t.Fatal(err)
		}
		writeSeed(t, dir, fmt.Sprintf("request-%d", i), b)
	}
	var pv corev1.PersistentVolumeSpec
	fill.Fill(&pv)
	specs, _ := grpcbridge.PVSpecsToProto([]*corev1.PersistentVolumeSpec{&pv, nil})
	b, _ := proto.Marshal(&driverv1.GetVolumeIDsRequest{PvSpecs: specs, Provider: "openstack"})
	writeSeed(t, dir, "volumes", b)
}

func writeSeed(t *testing.T, dir, name string, data []byte) {
	content := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
