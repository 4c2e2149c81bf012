package standby

import (
	"slices"
	"strings"
)

// Plan is what the pool reconciler does to a deployment's pool in one pass.
type Plan struct {
	// Create is how many standby machines of the current template to create.
	Create int
	// Delete names the standby machines to delete: outdated ones, then the surplus.
	Delete []string
}

// PlanPool decides how a pool of members reaches want machines of template hash. Machines being
// deleted count for nothing. Every outdated machine goes (a rollout replaces standby machines as
// it replaces the others; a stopped machine of an old template is of no use to the new set). Of
// the current ones, a surplus goes youngest in its life first (Booting, then Stopping, then
// Stopped: a stopped machine has paid for its boot), by name within a state so a pass is stable.
func PlanPool(want int, hash string, members []Member) Plan {
	var p Plan
	var current []Member
	for _, m := range members {
		switch {
		case m.Deleting:
		case m.Hash != hash:
			p.Delete = append(p.Delete, m.Name)
		default:
			current = append(current, m)
		}
	}
	slices.Sort(p.Delete)
	if extra := len(current) - want; extra > 0 {
		slices.SortFunc(current, byLifeThenName)
		for _, m := range current[:extra] {
			p.Delete = append(p.Delete, m.Name)
		}
	} else {
		p.Create = -extra
	}
	return p
}

// Claimable picks up to n members a set of template hash may claim on a scale-up: stopped ones
// first (resumed in seconds), then booting ones (already on their way; claimed, they simply go on
// as the set's machines), by name within a state. Stopping ones are left to finish their stop;
// outdated and deleting ones are never claimed.
func Claimable(members []Member, hash string, n int) []string {
	var c []Member
	for _, m := range members {
		if !m.Deleting && m.Hash == hash && m.State != Stopping {
			c = append(c, m)
		}
	}
	slices.SortFunc(c, func(a, b Member) int {
		if d := lifeRank(b.State) - lifeRank(a.State); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	var out []string
	for _, m := range c[:min(max(n, 0), len(c))] {
		out = append(out, m.Name)
	}
	return out
}

// lifeRank orders states by how much of a standby machine's life is behind it.
func lifeRank(s State) int {
	switch s {
	case Stopped:
		return 2
	case Stopping:
		return 1
	}
	return 0
}

// byLifeThenName sorts the youngest in life first, then by name.
func byLifeThenName(a, b Member) int {
	if d := lifeRank(a.State) - lifeRank(b.State); d != 0 {
		return d
	}
	return strings.Compare(a.Name, b.Name)
}
