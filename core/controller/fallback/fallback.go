// Package fallback holds machinist's capacity fallback: the ordered MachineClasses a
// MachineDeployment (or a bare MachineSet) may create its machines on when its own class runs out
// of capacity, and the short-lived cache of classes that answered ResourceExhausted.
//
// It is a controller concern (docs/machine-controller.md, "Capacity fallback"): the Machine
// controller marks a class exhausted when a create fails with ResourceExhausted and moves the
// machine to the next class that is not marked; the MachineSet controller creates new machines on
// that class straight away and, when asked to, moves machines back to the primary class once its
// mark has expired; providers only report ResourceExhausted truthfully. The package has no
// Kubernetes client: the controllers read and write the objects; the Cluster Autoscaler server
// reads the marks through Marks.
package fallback

import (
	"fmt"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Annotations of the feature. Only AnnotationClasses and AnnotationRebalance are the user's; the
// others are the controllers' own state.
const (
	// AnnotationClasses on a MachineDeployment (copied to its MachineSets) or a bare MachineSet
	// lists the fallback MachineClasses in order, comma-separated, of the same namespace:
	// "m5-zone-b,m5-zone-c". Without it nothing in this package applies.
	AnnotationClasses = "machinist.io/fallback-classes"
	// AnnotationRebalance "true" moves machines running on a fallback class back to the primary
	// class, one at a time with a surge machine first, once the primary's mark has expired.
	AnnotationRebalance = "machinist.io/fallback-rebalance"
	// AnnotationVacate on a Machine without a VM names the class it was moved away from: that
	// class may still hold a VM of the machine (a create that failed half-way, or a crash between
	// a create and its record), so the Machine controller makes sure it holds none before it
	// creates on spec.class. Written in the same update that changes spec.class.
	AnnotationVacate = "machinist.io/fallback-vacate"
	// AnnotationSurge "true" on a Machine marks the extra machine the MachineSet controller
	// creates on the primary class to replace a fallback machine (the first one is the probe
	// that tests whether the primary has capacity again). It never falls back itself.
	AnnotationSurge = "machinist.io/fallback-surge"
	// AnnotationExhausted on a MachineClass publishes its exhausted mark ({"until": RFC3339,
	// "message": ...}) for processes without the controller's memory, the Cluster Autoscaler
	// server above all. The controller's in-memory Cache stays the authority.
	AnnotationExhausted = "machinist.io/capacity-exhausted"
)

// Event reasons and the MachineDeployment condition of the feature.
const (
	// ReasonCapacityFallback: a machine is created on a fallback class (Warning, on the Machine
	// and on its MachineDeployment).
	ReasonCapacityFallback = "CapacityFallback"
	// ReasonAllClassesExhausted: every class of a machine is marked; it waits with the usual
	// ResourceExhausted backoff.
	ReasonAllClassesExhausted = "AllClassesExhausted"
	// ReasonRebalance: a fallback machine is being moved back to the primary class.
	ReasonRebalance = "FallbackRebalance"
	// ReasonInvalidFallbackClasses: an entry of AnnotationClasses cannot be used.
	ReasonInvalidFallbackClasses = "InvalidFallbackClasses"
	// ReasonFallbackClassesValid: every entry of AnnotationClasses can be used.
	ReasonFallbackClassesValid = "FallbackClassesValid"

	// ConditionClasses is the MachineDeployment condition reporting the fallback list: True when
	// every entry is usable, False naming the entries that are not (creation goes on with the
	// others). Absent without AnnotationClasses.
	ConditionClasses v1alpha1.MachineDeploymentConditionType = "FallbackClasses"
)

// Problem is an entry of AnnotationClasses that cannot be used.
type Problem struct {
	// Entry is the entry as written (trimmed).
	Entry string
	// Position counts the entries from 1.
	Position int
	// Why says what is wrong and what to do.
	Why string
}

func (p Problem) String() string {
	if p.Position == 0 {
		// A problem of another annotation than the list (AnnotationOrder) or of a class's price.
		return p.Why
	}
	return fmt.Sprintf("entry %d %q: %s", p.Position, p.Entry, p.Why)
}

// Chain is the ordered list of classes a set's machines may be created on: the primary (the
// template's class) first, then the valid fallback entries.
type Chain struct {
	Namespace string
	Classes   []string
	// ByPrice tries the classes cheapest first (AnnotationOrder "price") instead of in the order
	// of Classes.
	ByPrice bool
}

// Primary is the template's class.
func (c Chain) Primary() string {
	if len(c.Classes) == 0 {
		return ""
	}
	return c.Classes[0]
}

// Contains reports whether class is in the chain.
func (c Chain) Contains(class string) bool {
	for _, n := range c.Classes {
		if n == class {
			return true
		}
	}
	return false
}

// Parse reads the value of AnnotationClasses for a set or deployment in namespace whose template
// class is primary. Entries are MachineClass names, or namespace/name of the same namespace.
// An empty entry, a class of another namespace, a duplicate and the primary itself (a cycle back
// to where the machine came from) are problems; the valid entries keep their order. Whether the
// classes exist is for the caller to check.
func Parse(namespace, primary, value string) (Chain, []Problem) {
	c := Chain{Namespace: namespace, Classes: []string{primary}}
	var problems []Problem
	seen := map[string]bool{primary: true}
	for i, raw := range strings.Split(value, ",") {
		entry := strings.TrimSpace(raw)
		p := Problem{Entry: entry, Position: i + 1}
		name := entry
		if ns, n, ok := strings.Cut(entry, "/"); ok {
			if ns != namespace {
				p.Why = fmt.Sprintf("MachineClass of namespace %q: fallback classes must be in the machines' namespace %q; create the class there", ns, namespace)
				problems = append(problems, p)
				continue
			}
			name = n
		}
		switch {
		case name == "":
			if strings.TrimSpace(value) == "" {
				p.Why = "the list is empty: name MachineClasses separated by commas, or remove the annotation"
			} else {
				p.Why = "empty entry: remove the extra comma"
			}
		case strings.Contains(name, "/"):
			p.Why = "not a MachineClass name: use <name> or <namespace>/<name>"
		case name == primary:
			p.Why = fmt.Sprintf("names the template's own class %q (a cycle): remove it, the template's class is always tried first", primary)
		case seen[name]:
			p.Why = fmt.Sprintf("MachineClass %q is listed twice: remove the duplicate", name)
		default:
			seen[name] = true
			c.Classes = append(c.Classes, name)
			continue
		}
		problems = append(problems, p)
	}
	return c, problems
}

// TemplateClass is the class a MachineSet's template names (the set's machineClass when the
// template has none, as the MachineSet controller creates machines).
func TemplateClass(ms *v1alpha1.MachineSet) string {
	if n := ms.Spec.Template.Spec.Class.Name; n != "" {
		return n
	}
	return ms.Spec.MachineClass.Name
}

// ChainOf returns the chain of a MachineSet and the problems of its annotation; ok is false when
// the set has no AnnotationClasses (no fallback: nothing changes for it).
func ChainOf(ms *v1alpha1.MachineSet) (c Chain, problems []Problem, ok bool) {
	return ParseAnnotations(ms.Namespace, TemplateClass(ms), ms.Annotations)
}

// RebalanceEnabled reports whether a set asks for machines to move back to the primary class.
// Never under price order, which does not prefer the template's class.
func RebalanceEnabled(o interface{ GetAnnotations() map[string]string }) bool {
	a := o.GetAnnotations()
	if byPrice, _ := orderOf(a); byPrice {
		return false
	}
	return strings.EqualFold(strings.TrimSpace(a[AnnotationRebalance]), "true")
}

// OnFallback reports whether a machine of ms runs on a fallback class: its spec.class is a class
// of the set's chain other than the template's. Such a machine is part of its set and is not
// outdated: a rollout compares templates, and whoever compares a machine with its set's template
// must treat a machine for which this is true as carrying the template's class.
func OnFallback(m *v1alpha1.Machine, ms *v1alpha1.MachineSet) bool {
	if _, ok := ms.Annotations[AnnotationClasses]; !ok {
		return false
	}
	cls := m.Spec.Class.Name
	return cls != "" && cls != TemplateClass(ms)
}

// IsSurge reports whether a machine is a rebalance surge machine.
func IsSurge(m *v1alpha1.Machine) bool {
	return strings.EqualFold(m.Annotations[AnnotationSurge], "true")
}

// Position is the position (from 1) of the entry of an AnnotationClasses value that names class
// in namespace, 0 when none does.
func Position(namespace, value, class string) int {
	for i, raw := range strings.Split(value, ",") {
		e := strings.TrimSpace(raw)
		if e == class || e == namespace+"/"+class {
			return i + 1
		}
	}
	return 0
}
