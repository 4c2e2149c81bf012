package grpcbridge

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// EncodeRequestForTest returns the bytes the client sends for a request holding the objects:
// machine requests when list is false, a ListMachines request (class and secret only) when true.
func EncodeRequestForTest(list bool, m *v1alpha1.Machine, c *v1alpha1.MachineClass, s *corev1.Secret) ([]byte, error) {
	f := machineRequestFields
	if list {
		f = listRequestFields
	}
	r, err := encodeRequest(f, m, c, s)
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), *r.buf...)
	requestBuffers.Put(r.buf)
	return out, nil
}
