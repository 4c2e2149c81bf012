package gcp

import (
	"fmt"
	"sort"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/driver"
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
	if m == nil || m.Name == "" {
		return "", driver.Error(driver.InvalidArgument, "gcp: the request carries no machine name")
	}
	if !resourceNamePattern.MatchString(m.Name) {
		return "", driver.Errorf(driver.InvalidArgument,
			"gcp: machine name %q cannot name a Compute Engine instance: use at most 63 lowercase letters, digits and '-', starting with a letter and not ending with '-'", m.Name)
	}
	return m.Name, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
