package autoscaler

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Annotation keys (on a MachineDeployment) and option keys (in a static group's options map)
// that override Cluster Autoscaler's per-group autoscaling options. Each key is a suffix; on a
// MachineDeployment it follows OptionsPrefix, or MCM's GardenerOptionsPrefix for the keys MCM's
// Cluster Autoscaler provider reads (ours wins when both are set).
const (
	OptionScaleDownUtilizationThreshold    = "scale-down-utilization-threshold"
	OptionScaleDownGpuUtilizationThreshold = "scale-down-gpu-utilization-threshold"
	OptionScaleDownUnneededTime            = "scale-down-unneeded-time"
	OptionScaleDownUnreadyTime             = "scale-down-unready-time"
	OptionMaxNodeProvisionTime             = "max-node-provision-time"
	OptionZeroOrMaxNodeScaling             = "zero-or-max-node-scaling"
	OptionIgnoreDaemonSetsUtilization      = "ignore-daemonsets-utilization"

	// OptionsPrefix is machinist's annotation prefix.
	OptionsPrefix = "autoscaler.machinist.io/"
	// GardenerOptionsPrefix is the prefix Gardener's MCM cloud provider reads.
	GardenerOptionsPrefix = "autoscaler.gardener.cloud/"
)

// OptionKeys lists every option key.
var OptionKeys = []string{
	OptionScaleDownUtilizationThreshold, OptionScaleDownGpuUtilizationThreshold,
	OptionScaleDownUnneededTime, OptionScaleDownUnreadyTime, OptionMaxNodeProvisionTime,
	OptionZeroOrMaxNodeScaling, OptionIgnoreDaemonSetsUtilization,
}

// gardenerKeys are the option keys MCM's provider knows.
var gardenerKeys = map[string]bool{
	OptionScaleDownUtilizationThreshold: true, OptionScaleDownGpuUtilizationThreshold: true,
	OptionScaleDownUnneededTime: true, OptionScaleDownUnreadyTime: true, OptionMaxNodeProvisionTime: true,
}

// OptionsFromAnnotations reads a MachineDeployment's option annotations. A value that does not
// parse is skipped (Cluster Autoscaler keeps its default) and reported in problems, so one typo never breaks
// the group's scale-down.
func OptionsFromAnnotations(annotations map[string]string) (Options, []string) {
	values := map[string]string{}
	keys := map[string]string{}
	for _, k := range OptionKeys {
		if v, ok := annotations[OptionsPrefix+k]; ok {
			values[k], keys[k] = v, OptionsPrefix+k
		} else if v, ok := annotations[GardenerOptionsPrefix+k]; ok && gardenerKeys[k] {
			values[k], keys[k] = v, GardenerOptionsPrefix+k
		}
	}
	o, problems := parseOptions(values, keys)
	return o, problems
}

// ParseOptions reads a static group's options map (keys without prefix). Unknown keys and bad
// values are errors naming the key, since a config file is checked before anything runs.
func ParseOptions(values map[string]string) (Options, error) {
	var unknown []string
	known := map[string]bool{}
	for _, k := range OptionKeys {
		known[k] = true
	}
	keys := map[string]string{}
	for k := range values {
		if !known[k] {
			unknown = append(unknown, k)
		}
		keys[k] = k
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Options{}, fmt.Errorf("unknown option %s: use one of %s", strings.Join(unknown, ", "), strings.Join(OptionKeys, ", "))
	}
	o, problems := parseOptions(values, keys)
	if len(problems) > 0 {
		return Options{}, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return o, nil
}

func parseOptions(values, keys map[string]string) (Options, []string) {
	var o Options
	var problems []string
	fraction := func(k string) *float64 {
		v, ok := values[k]
		if !ok {
			return nil
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > 1 {
			problems = append(problems, fmt.Sprintf("%s=%q: want a number between 0 and 1, e.g. 0.5", keys[k], v))
			return nil
		}
		return &f
	}
	duration := func(k string) *time.Duration {
		v, ok := values[k]
		if !ok {
			return nil
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			problems = append(problems, fmt.Sprintf("%s=%q: want a non-negative Go duration, e.g. 10m", keys[k], v))
			return nil
		}
		return &d
	}
	boolean := func(k string) *bool {
		v, ok := values[k]
		if !ok {
			return nil
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s=%q: want true or false", keys[k], v))
			return nil
		}
		return &b
	}
	o.ScaleDownUtilizationThreshold = fraction(OptionScaleDownUtilizationThreshold)
	o.ScaleDownGpuUtilizationThreshold = fraction(OptionScaleDownGpuUtilizationThreshold)
	o.ScaleDownUnneededTime = duration(OptionScaleDownUnneededTime)
	o.ScaleDownUnreadyTime = duration(OptionScaleDownUnreadyTime)
	o.MaxNodeProvisionTime = duration(OptionMaxNodeProvisionTime)
	o.ZeroOrMaxNodeScaling = boolean(OptionZeroOrMaxNodeScaling)
	o.IgnoreDaemonSetsUtilization = boolean(OptionIgnoreDaemonSetsUtilization)
	sort.Strings(problems)
	return o, problems
}

// String lists the overridden options, for debug text.
func (o Options) String() string {
	var parts []string
	if o.ScaleDownUtilizationThreshold != nil {
		parts = append(parts, fmt.Sprintf("%s=%g", OptionScaleDownUtilizationThreshold, *o.ScaleDownUtilizationThreshold))
	}
	if o.ScaleDownGpuUtilizationThreshold != nil {
		parts = append(parts, fmt.Sprintf("%s=%g", OptionScaleDownGpuUtilizationThreshold, *o.ScaleDownGpuUtilizationThreshold))
	}
	if o.ScaleDownUnneededTime != nil {
		parts = append(parts, fmt.Sprintf("%s=%s", OptionScaleDownUnneededTime, *o.ScaleDownUnneededTime))
	}
	if o.ScaleDownUnreadyTime != nil {
		parts = append(parts, fmt.Sprintf("%s=%s", OptionScaleDownUnreadyTime, *o.ScaleDownUnreadyTime))
	}
	if o.MaxNodeProvisionTime != nil {
		parts = append(parts, fmt.Sprintf("%s=%s", OptionMaxNodeProvisionTime, *o.MaxNodeProvisionTime))
	}
	if o.ZeroOrMaxNodeScaling != nil {
		parts = append(parts, fmt.Sprintf("%s=%t", OptionZeroOrMaxNodeScaling, *o.ZeroOrMaxNodeScaling))
	}
	if o.IgnoreDaemonSetsUtilization != nil {
		parts = append(parts, fmt.Sprintf("%s=%t", OptionIgnoreDaemonSetsUtilization, *o.IgnoreDaemonSetsUtilization))
	}
	return strings.Join(parts, ",")
}
