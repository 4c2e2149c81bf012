// Package drivercall instruments driver calls of the controllers: every call is counted by
// provider, method and result code and timed, in controller-runtime's metrics registry (served
// on the manager's /metrics), and recorded in MCM's mcm_cloud_api_driver_* metrics
// (core/cloudmetrics). It is shared by the Machine controller and the orphan collector. It forwards
// the optional power capability (driver.PowerDriver) of the driver it wraps, and reports it through
// driver.CapabilityReporter, so wrapping never adds nor hides a capability.
package drivercall

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/machinist-io/machinist/core/cloudmetrics"
	"github.com/machinist-io/machinist/core/driver"
)

var (
	calls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "machinist_driver_calls_total",
		Help: "Driver calls by provider, method and result code (OK on success).",
	}, []string{"provider", "method", "code"})
	latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "machinist_driver_call_duration_seconds",
		Help:    "Duration of driver calls by provider and method.",
		Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1200},
	}, []string{"provider", "method"})
)

func init() { metrics.Registry.MustRegister(calls, latency) }

// Method names as they appear in the method label of machinist's metrics.
const (
	CreateMachine     = "CreateMachine"
	InitializeMachine = "InitializeMachine"
	DeleteMachine     = "DeleteMachine"
	GetMachineStatus  = "GetMachineStatus"
	ListMachines      = "ListMachines"
	GetVolumeIDs      = "GetVolumeIDs"
	StopMachine       = "StopMachine"
	StartMachine      = "StartMachine"
)

// Driver wraps a driver so each call is measured under provider.
type Driver struct {
	Provider string
	Driver   driver.Driver
}

// Instrument wraps d for provider.
func Instrument(provider string, d driver.Driver) *Driver {
	return &Driver{Provider: provider, Driver: d}
}

// mcmOperations names the methods as MCM's operation label does.
var mcmOperations = map[string]string{
	CreateMachine:     cloudmetrics.CreateMachine,
	InitializeMachine: cloudmetrics.InitializeMachine,
	DeleteMachine:     cloudmetrics.DeleteMachine,
	GetMachineStatus:  cloudmetrics.GetMachineStatus,
	ListMachines:      cloudmetrics.ListMachines,
	GetVolumeIDs:      cloudmetrics.GetVolumeIDs,
}

func (d *Driver) observe(method string, start time.Time, err error) {
	took := time.Since(start)
	latency.WithLabelValues(d.Provider, method).Observe(took.Seconds())
	calls.WithLabelValues(d.Provider, method, driver.CodeOf(err).String()).Inc()
	if op, ok := mcmOperations[method]; ok { // MCM's driver has no StopMachine or StartMachine
		cloudmetrics.DriverCall(d.Provider, op, took, err)
	}
}

func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (_ *driver.CreateMachineResponse, err error) {
	start := time.Now()
	defer func() { d.observe(CreateMachine, start, err) }()
	return d.Driver.CreateMachine(ctx, req)
}

func (d *Driver) InitializeMachine(ctx context.Context, req *driver.InitializeMachineRequest) (_ *driver.InitializeMachineResponse, err error) {
	start := time.Now()
	defer func() { d.observe(InitializeMachine, start, err) }()
	return d.Driver.InitializeMachine(ctx, req)
}

func (d *Driver) DeleteMachine(ctx context.Context, req *driver.DeleteMachineRequest) (_ *driver.DeleteMachineResponse, err error) {
	start := time.Now()
	defer func() { d.observe(DeleteMachine, start, err) }()
	return d.Driver.DeleteMachine(ctx, req)
}

func (d *Driver) GetMachineStatus(ctx context.Context, req *driver.GetMachineStatusRequest) (_ *driver.GetMachineStatusResponse, err error) {
	start := time.Now()
	defer func() { d.observe(GetMachineStatus, start, err) }()
	return d.Driver.GetMachineStatus(ctx, req)
}

func (d *Driver) ListMachines(ctx context.Context, req *driver.ListMachinesRequest) (_ *driver.ListMachinesResponse, err error) {
	start := time.Now()
	defer func() { d.observe(ListMachines, start, err) }()
	return d.Driver.ListMachines(ctx, req)
}

func (d *Driver) GetVolumeIDs(ctx context.Context, req *driver.GetVolumeIDsRequest) (_ *driver.GetVolumeIDsResponse, err error) {
	start := time.Now()
	defer func() { d.observe(GetVolumeIDs, start, err) }()
	return d.Driver.GetVolumeIDs(ctx, req)
}

// StopMachine forwards to the wrapped driver's power capability (driver.PowerOf), measured.
func (d *Driver) StopMachine(ctx context.Context, req *driver.StopMachineRequest) (_ *driver.StopMachineResponse, err error) {
	start := time.Now()
	defer func() { d.observe(StopMachine, start, err) }()
	p, err := driver.PowerOf(ctx, d.Provider, d.Driver)
	if err != nil {
		return nil, err
	}
	return p.StopMachine(ctx, req)
}

// StartMachine forwards to the wrapped driver's power capability (driver.PowerOf), measured.
func (d *Driver) StartMachine(ctx context.Context, req *driver.StartMachineRequest) (_ *driver.StartMachineResponse, err error) {
	start := time.Now()
	defer func() { d.observe(StartMachine, start, err) }()
	p, err := driver.PowerOf(ctx, d.Provider, d.Driver)
	if err != nil {
		return nil, err
	}
	return p.StartMachine(ctx, req)
}

// Capabilities are the wrapped driver's: a wrapper has no capability of its own.
func (d *Driver) Capabilities(ctx context.Context) (driver.Capabilities, error) {
	return driver.CapabilitiesOf(ctx, d.Driver)
}

var (
	_ driver.Driver             = (*Driver)(nil)
	_ driver.PowerDriver        = (*Driver)(nil)
	_ driver.CapabilityReporter = (*Driver)(nil)
)
