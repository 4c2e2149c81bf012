package grpcbridge

import "github.com/machinist-io/machinist/core/apis/machine/v1alpha1"

// MachineEncoderReusingOneTree returns EncodeMachine with a single message tree reused on every
// call, which is what the pool does when it hands back the tree of the call before.
func MachineEncoderReusingOneTree() func(*v1alpha1.Machine) ([]byte, error) {
	t := new(machineMessages)
	return func(m *v1alpha1.Machine) ([]byte, error) {
		p, err := t.fill(m)
		if err != nil {
			return nil, err
		}
		return deterministic.Marshal(p)
	}
}
