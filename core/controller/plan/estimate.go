package plan

import (
	"fmt"
	"slices"
	"time"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/rollout"
)

// maxSamples: the estimate reads the deployment's most recent creations, not its whole history.
const maxSamples = 10

// estimate is how long waves of creations take, each as long as the median of the deployment's
// recent creations (from a machine's creation to the last change of its phase to Running). A
// replacement's drain runs while the next wave is created, so it adds no wave of its own. ""
// when no machine of the deployment is Running yet.
func estimate(in rollout.Input, waves int) (string, string) {
	if waves == 0 {
		return "", ""
	}
	var took []time.Duration
	var newest []time.Time
	for _, ms := range in.Machines {
		for _, m := range ms {
			st := m.Status.CurrentStatus
			if m.DeletionTimestamp != nil || st.Phase != v1alpha1.MachineRunning || st.LastUpdateTime.IsZero() {
				continue
			}
			if d := st.LastUpdateTime.Sub(m.CreationTimestamp.Time); d >= 0 {
				// The API server keeps times to the second: a creation within one counts as one.
				took = append(took, max(d, time.Second))
				newest = append(newest, m.CreationTimestamp.Time)
			}
		}
	}
	if len(took) == 0 {
		return "", "no machine of the deployment is Running yet: nothing to estimate from"
	}
	// The most recent creations: sort both by creation time, newest first.
	idx := make([]int, len(took))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return newest[b].Compare(newest[a]) })
	if len(idx) > maxSamples {
		idx = idx[:maxSamples]
	}
	recent := make([]time.Duration, len(idx))
	for i, j := range idx {
		recent[i] = took[j]
	}
	slices.Sort(recent)
	median := recent[len(recent)/2]
	total := time.Duration(waves) * median
	return total.Round(time.Second).String(), fmt.Sprintf("%d waves of creations x %s (the median of the deployment's %d most recent creations)",
		waves, median.Round(time.Second), len(recent))
}
