package grpcbridge_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
)

// TestConcurrentRequestsKeepTheirObjects sends requests of very different sizes from many
// goroutines at once (gRPC's pooled buffers, reused too early, would mix their bytes), one of
// them of 600 KiB; every driver call must see exactly the objects its caller sent.
func TestConcurrentRequestsKeepTheirObjects(t *testing.T) {
	echo := &fixture.FuncDriver{Handle: func(_ context.Context, _ string, req any) (any, error) {
		r := req.(*driver.GetMachineStatusRequest)
		// Answer with what arrived, so the caller can check it was its own request.
		return &driver.GetMachineStatusResponse{NodeName: r.Machine.Name, ProviderID: string(r.Secret.Data["userData"])}, nil
	}}
	served := fixture.ServeUnix(t, echo)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				size := 1 + (g*37+i*101)%9000
				if g == 0 && i == 0 {
					size = 600 << 10
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
