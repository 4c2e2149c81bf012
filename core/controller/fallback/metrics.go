package fallback

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	exhaustedMarks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "machinist_fallback_exhausted_marks_total",
		Help: "Times a MachineClass was marked exhausted after a create failed with ResourceExhausted.",
	}, []string{"namespace", "class"})

	fallbackMachines = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "machinist_fallback_machines",
		Help: "Machines of a MachineDeployment that run on a fallback class instead of the template's class.",
	}, []string{"namespace", "machinedeployment"})

	registerOnce sync.Once
	registerErr  error
)

// RegisterMetrics adds the fallback metrics to reg once per process (the controllers pass
// controller-runtime's registry); later calls return the first result.
func RegisterMetrics(reg prometheus.Registerer) error {
	registerOnce.Do(func() {
		for _, c := range []prometheus.Collector{exhaustedMarks, fallbackMachines} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					registerErr = err
					return
				}
			}
		}
	})
	return registerErr
}

// SetFallbackMachines records how many machines of a deployment run on a fallback class.
func SetFallbackMachines(namespace, deployment string, n int) {
	fallbackMachines.WithLabelValues(namespace, deployment).Set(float64(n))
}

// ForgetDeployment drops a deleted deployment's gauge.
func ForgetDeployment(namespace, deployment string) {
	fallbackMachines.DeleteLabelValues(namespace, deployment)
}
