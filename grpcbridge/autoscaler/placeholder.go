package autoscaler

import "strings"

// PlaceholderScheme prefixes the ids of instances that have no providerID yet. It is MCM's
// "requested://" so that dashboards and people who know the Gardener integration recognise it.
const PlaceholderScheme = "requested://"

// Placeholder returns the instance id of a machine that has no providerID yet:
// requested://<scope>/<name>, where scope is the machine's namespace (MachineDeployment groups)
// or its group id (static groups). Cluster Autoscaler passes it back as the name and providerID of a fake node,
// so ParsePlaceholder must recover the machine from it.
func Placeholder(scope, name string) string {
	return PlaceholderScheme + scope + "/" + name
}

// ParsePlaceholder splits a placeholder id into scope and machine name.
func ParsePlaceholder(id string) (scope, name string, ok bool) {
	rest, found := strings.CutPrefix(id, PlaceholderScheme)
	if !found {
		return "", "", false
	}
	scope, name, found = strings.Cut(rest, "/")
	if !found || scope == "" || name == "" || strings.Contains(name, "/") {
		return "", "", false
	}
	return scope, name, true
}
