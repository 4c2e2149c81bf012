package kit

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
)

// MachineName is the name of the request's machine, or InvalidArgument when it has none.
func MachineName(provider string, m *v1alpha1.Machine) (string, error) {
	if m == nil || m.Name == "" {
		return "", driver.Errorf(driver.InvalidArgument, "%s: the request carries no machine name", provider)
	}
	return m.Name, nil
}

// Volumes finds a provider's volumes among persistent volume specs: InTree reads the volume of
// the cloud's in-tree volume source, CSIDriver names its CSI driver (whose volume handle is the
// volume).
type Volumes struct {
	// InTree returns the volume ID of spec's in-tree source of the cloud, "" for another source.
	InTree func(spec *corev1.PersistentVolumeSpec) string
	// CSIDriver is the name of the cloud's CSI driver (ebs.csi.aws.com).
	CSIDriver string
}

// IDs answers GetVolumeIDs: the volume ID of each spec of the cloud's, in order, skipping every
// other spec.
func (v Volumes) IDs(specs []*corev1.PersistentVolumeSpec) *driver.GetVolumeIDsResponse {
	ids := []string{}
	for _, spec := range specs {
		if id := v.id(spec); id != "" {
			ids = append(ids, id)
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}
}

func (v Volumes) id(spec *corev1.PersistentVolumeSpec) string {
	switch {
	case spec == nil:
		return ""
	case spec.CSI != nil:
		if spec.CSI.Driver == v.CSIDriver {
			return spec.CSI.VolumeHandle
		}
		return ""
	case v.InTree != nil:
		return v.InTree(spec)
	}
	return ""
}
