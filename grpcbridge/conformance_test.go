package grpcbridge_test

import (
	"testing"

	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/core/drivertest"
	"github.com/machinist-io/machinist/grpcbridge/internal/fixture"
)

// TestConformance runs the conformance kit against the reference driver and the local provider,
// each directly and through the dial-out bridge over a unix socket and over TCP with mutual TLS.
// (Through dial-in: package dialin.)
func TestConformance(t *testing.T) {
	targets := []struct {
		name string
		new  func(t testing.TB) drivertest.Target
	}{{"mem", fixture.MemTarget}, {"local", fixture.LocalTarget}}
	ways := []struct {
		name string
		wrap func(t testing.TB, d driver.Driver) driver.Driver
	}{
		{"direct", func(_ testing.TB, d driver.Driver) driver.Driver { return d }},
		{"uds", func(t testing.TB, d driver.Driver) driver.Driver { return fixture.ServeUnix(t, d).Client }},
		{"tcp-mtls", func(t testing.TB, d driver.Driver) driver.Driver { return fixture.ServeTCPMTLS(t, d).Client }},
	}
	for _, tg := range targets {
		for _, w := range ways {
			t.Run(tg.name+"/"+w.name, func(t *testing.T) {
				drivertest.Run(t, func(t testing.TB) drivertest.Target {
					target := tg.new(t)
					target.Driver = w.wrap(t, target.Driver)
					return target
				})
			})
		}
	}
}
