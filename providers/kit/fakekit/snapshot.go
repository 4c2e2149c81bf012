package fakekit

import (
	"maps"
	"slices"
	"sync"
)

// Snapshot lists copies of a fake's resources of one kind for its callers: under mu, after
// settle (what time has done meanwhile: builds finished, deletions completed), each resource
// cloned, ordered by cmp (by key in m when cmp is nil).
func Snapshot[V, T any](mu sync.Locker, settle func(), m map[string]V, clone func(V) T, cmp func(a, b T) int) []T {
	mu.Lock()
	defer mu.Unlock()
	if settle != nil {
		settle()
	}
	out := make([]T, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, clone(m[k]))
	}
	if cmp != nil {
		slices.SortStableFunc(out, cmp)
	}
	return out
}
