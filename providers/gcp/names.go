package gcp

import (
	"fmt"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/providers/kit"
)

// providerIDPrefix starts the ProviderIDs of Gardener's GCP provider: gce:///PROJECT/ZONE/NAME
// (pkg/gcp/machine_controller_util.go, encodeMachineID: "gce://" + "/" + project...), kept so
// that machines MCM created and the VMs machinist lists match.
const providerIDPrefix = "gce://"

// providerID is the ProviderID of an instance, as Gardener's provider writes it.
func providerID(project, zone, name string) string {
	return fmt.Sprintf("%s/%s/%s/%s", providerIDPrefix, project, zone, name)
}

// parseProviderID reads gce:///PROJECT/ZONE/NAME (Gardener's) or gce://PROJECT/ZONE/NAME (the
// GCE cloud provider's node ProviderID).
func parseProviderID(id string) (project, zone, name string, ok bool) {
	rest, found := strings.CutPrefix(id, providerIDPrefix)
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || !resourceNamePattern.MatchString(parts[2]) {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// instanceName is the instance of a machine: the machine's name, as in Gardener.
func instanceName(m *v1alpha1.Machine) (string, error) {
	if _, err := kit.MachineName(ProviderName, m); err != nil {
		return "", err
	}
	if !resourceNamePattern.MatchString(m.Name) {
		return "", driver.Errorf(driver.InvalidArgument,
			"gcp: machine name %q cannot name a Compute Engine instance: use at most 63 lowercase letters, digits and '-', starting with a letter and not ending with '-'", m.Name)
	}
	return m.Name, nil
}

// machineInstance is the zone and name of the machine's instance: those its provider ID names,
// else the class's zone and the machine's name. A machine without a name is InvalidArgument; one
// whose name cannot name an instance (CreateMachine refuses it) has none: NotFound.
func machineInstance(m *v1alpha1.Machine, spec *ProviderSpec) (zone, name string, err error) {
	if _, err := kit.MachineName(ProviderName, m); err != nil {
		return "", "", err
	}
	if _, z, n, ok := parseProviderID(m.Spec.ProviderID); ok {
		return z, n, nil
	}
	if name, err = instanceName(m); err != nil {
		return "", "", driver.Errorf(driver.NotFound, "gcp: no instance can be named %q: %s", m.Name, driver.MessageOf(err))
	}
	return spec.Zone, name, nil
}
