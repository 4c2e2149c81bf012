package dialin_test

import (
	"context"
	"testing"
	"time"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/core/drivertest/memdriver"
	"github.com/machinist-io/machinist/grpcbridge/dialin"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
	"github.com/machinist-io/machinist/providers/local"
)

// dialled serves d as provider name through a controller with mutual TLS and returns the
// controller-side driver.
func dialled(t testing.TB, name string, d driver.Driver) (driver.Driver, *fixture.Controller, *fixture.Connected) {
	t.Helper()
	certs := fixture.NewCerts(t)
	ctrl := fixture.ServeController(t, dialin.Options{}, fixture.ServerTransport(t, certs))
	p := fixture.ConnectProvider(t, ctrl.Addr, fixture.ProviderCerts(t, certs, name), map[string]driver.Driver{name: d})
	waitFor(t, ctrl.Server, name, 1)
	remote, ok := ctrl.Server.Driver(name)
	if !ok {
		t.Fatalf("provider %s connected but has no driver", name)
	}
	return remote, ctrl, p
}

func waitFor(t testing.TB, s *dialin.Server, name string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitFor(ctx, name, n); err != nil {
		t.Fatal(err)
	}
}

// TestConformance runs the conformance kit through dial-in (TCP, mutual TLS) for the reference
// driver and the local provider.
func TestConformance(t *testing.T) {
	for name, target := range map[string]func(testing.TB) drivertest.Target{
		memdriver.ProviderName: fixture.MemTarget,
		local.ProviderName:     fixture.LocalTarget,
	} {
		t.Run(name, func(t *testing.T) {
			drivertest.Run(t, func(t testing.TB) drivertest.Target {
				tg := target(t)
				tg.Driver, _, _ = dialled(t, name, tg.Driver)
				return tg
			})
		})
	}
}
