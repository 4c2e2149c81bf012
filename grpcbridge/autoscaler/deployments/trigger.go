package deployments

import (
	"sort"
	"strings"
)

// parseTriggerDeletion reads the trigger-deletion-by-mcm annotation of a MachineDeployment:
// comma-separated "<machine>~<RFC3339 time>" entries (MCM's format; surrounding brackets, as the
// API documentation writes the list, are tolerated). It maps machine name to time.
func parseTriggerDeletion(value string) map[string]string {
	out := map[string]string{}
	value = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(value), "["), "]")
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, ts, _ := strings.Cut(entry, "~")
		if name != "" {
			out[name] = ts
		}
	}
	return out
}

// formatTriggerDeletion writes the annotation value, entries sorted by machine name as MCM
// writes them.
func formatTriggerDeletion(entries map[string]string) string {
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		if ts := entries[name]; ts != "" {
			parts = append(parts, name+"~"+ts)
		} else {
			parts = append(parts, name)
		}
	}
	return strings.Join(parts, ",")
}
