package grpcbridge_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	driverv1 "github.com/machinist-io/machinist/grpcbridge/proto/machinist/driver/v1"
)

// generatedRequest is what proto.Marshal writes for the generated request message.
func generatedRequest(t *testing.T, list bool, m *v1alpha1.Machine, c *v1alpha1.MachineClass, s *corev1.Secret) []byte {
	t.Helper()
	class, sec := must(grpcbridge.EncodeMachineClass(c)), must(grpcbridge.EncodeSecret(s))
	var msg proto.Message
	if list {
		msg = &driverv1.ListMachinesRequest{MachineClass: class, Secret: sec}
	} else {
		msg = &driverv1.GetMachineStatusRequest{Machine: must(grpcbridge.EncodeMachine(m)), MachineClass: class, Secret: sec}
	}
	return must(proto.MarshalOptions{Deterministic: true}.Marshal(msg))
}

// TestRequestEncodingMatchesGenerated: the client's one-pass request encoding writes exactly the
// bytes of the generated message, for realistic and random objects, with any object missing.
func TestRequestEncodingMatchesGenerated(t *testing.T) {
	type objs struct {
		m *v1alpha1.Machine
		c *v1alpha1.MachineClass
		s *corev1.Secret
	}
	cases := []objs{
		{fixture.Machine("m-1"), fixture.Class("openstack"), fixture.Secret()},
		{nil, fixture.Class("openstack"), fixture.Secret()},
		{fixture.Machine("m-1"), nil, nil},
		{nil, nil, nil},
		{&v1alpha1.Machine{}, &v1alpha1.MachineClass{}, &corev1.Secret{}},
	}
	f := objectFiller(t, 7)
	for i := 0; i < 100; i++ {
		var o objs = objs{&v1alpha1.Machine{}, &v1alpha1.MachineClass{}, &corev1.Secret{}}
		f.Fill(o.m)
		f.Fill(o.c)
		f.Fill(o.s)
		cases = append(cases, o)
	}
	for i, o := range cases {
		for _, list := range []bool{false, true} {
			got := must(grpcbridge.EncodeRequestForTest(list, o.m, o.c, o.s))
			m := o.m
			if list {
				m = nil // ListMachines carries no machine
			}
			if want := generatedRequest(t, list, m, o.c, o.s); !bytes.Equal(got, want) {
				t.Fatalf("case %d (list %v): one-pass encoding differs from the generated message (%d vs %d bytes)", i, list, len(got), len(want))
			}
		}
	}
}

// TestPooledRequestBuffers sends requests of very different sizes from many goroutines at once
// (a pooled buffer reused too early would mix their bytes) and one request larger than the pool
// keeps; every driver call must see exactly the objects its caller sent.
func TestPooledRequestBuffers(t *testing.T) {
	echo := &fixture.FuncDriver{Handle: func(_ context.Context, _ string, req any) (any, error) {
		r := req.(*driver.GetMachineStatusRequest)
		// Answer with what arrived, so the caller can check it was its own request.
		return &driver.GetMachineStatusResponse{NodeName: r.Machine.Name, ProviderID: string(r.Secret.Data["userData"])}, nil
	}}
	served := fixture.ServeUnix(t, echo)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				size := 1 + (g*37+i*101)%9000
				if g == 0 && i == 0 {
					size = 600 << 10 // beyond the largest buffer the pool keeps
				}
				name := "m-" + strings.Repeat("x", g) + "-" + string(rune('a'+i))
				secret := fixture.Secret()
				secret.Data["userData"] = bytes.Repeat([]byte{byte('A' + g)}, size)
				resp, err := served.Client.GetMachineStatus(context.Background(), &driver.GetMachineStatusRequest{
					Machine: fixture.Machine(name), MachineClass: fixture.Class("openstack"), Secret: secret})
				if err != nil {
					errs <- err
					return
				}
				if resp.NodeName != name || resp.ProviderID != string(secret.Data["userData"]) {
					errs <- errMismatch{name, resp.NodeName}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

type errMismatch struct{ want, got string }

func (e errMismatch) Error() string { return "request of " + e.want + " arrived as " + e.got }
