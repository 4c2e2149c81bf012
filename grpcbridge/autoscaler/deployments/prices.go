package deployments

import (
	"fmt"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/core/controller/fallback"
	"github.com/machinist-io/machinist/core/driver"
	"github.com/machinist-io/machinist/grpcbridge/autoscaler"
)

// ReasonInvalidPrice is the reason of the Warning Event on a MachineClass or MachineDeployment
// whose fallback.AnnotationPricePerHour does not parse.
const ReasonInvalidPrice = "InvalidPrice"

// Prices: a group's price is its deployment's own price annotation, else the price of the class
// a new node would get now (with capacity fallback, the class fallback.Pick chooses: the first
// one not marked out of capacity, or under price order the cheapest one not marked); a node of a
// group costs what its machine's class costs (the deployment's own price when it has one).

// indexPrices are exhausted marks with the prices of the classes in the index, for fallback.Pick
// under price order. Users hold ix.mu.
type indexPrices struct {
	fallback.Marks
	ix *index
}

func (m indexPrices) Price(namespace, class string) (float64, bool) {
	info, ok := m.ix.classInfo[key{Namespace: namespace, Name: class}]
	return info.price, ok && info.priced
}

var _ fallback.Prices = indexPrices{}

// newNodeClassLocked is the class a new machine of the group is created on now: the template's,
// or with fallback classes the one fallback.Pick chooses (the template's when every class is
// marked, as the controllers do).
func (p *Source) newNodeClassLocked(g *group, md *v1alpha1.MachineDeployment) string {
	name := md.Spec.Template.Spec.Class.Name
	if chain, ok := p.chainLocked(g); ok {
		if next, _, found := fallback.Pick(chain, indexPrices{Marks: p.marks(), ix: p.ix}, nil); found {
			name = next
		}
	}
	return name
}

// classPriceLocked is the price of a class of the namespace, ErrNoPrice saying why it has none.
func (ix *index) classPriceLocked(namespace, name string) (autoscaler.Price, error) {
	k := key{Namespace: namespace, Name: name}
	info, ok := ix.classInfo[k]
	switch {
	case !ok:
		return autoscaler.Price{}, fmt.Errorf("MachineClass %s not found: %w", k, autoscaler.ErrNoPrice)
	case info.priceErr != nil:
		return autoscaler.Price{}, fmt.Errorf("MachineClass %s: %w", k, errNoPrice(info.priceErr))
	case !info.priced:
		return autoscaler.Price{}, fmt.Errorf("MachineClass %s has no %s: annotate it with the price per hour of its machines (e.g. \"0.096\") for Cluster Autoscaler's price expander: %w",
			k, fallback.AnnotationPricePerHour, autoscaler.ErrNoPrice)
	}
	return autoscaler.Price{PerHour: info.price, From: "MachineClass " + k.String()}, nil
}

// errNoPrice wraps a price annotation's parse error as ErrNoPrice.
func errNoPrice(err error) error { return fmt.Errorf("%w (%w)", autoscaler.ErrNoPrice, err) }

// groupPriceLocked is the price of a new node of the group, with the class it would run on.
func (p *Source) groupPriceLocked(g *group) (autoscaler.Price, string, error) {
	md := p.ix.mds[g.md]
	if md == nil {
		return autoscaler.Price{}, "", driver.Errorf(driver.NotFound, "node group %q: MachineDeployment %s not found", g.id, g.md)
	}
	class := p.newNodeClassLocked(g, md)
	switch {
	case g.priceErr != nil:
		return autoscaler.Price{}, class, fmt.Errorf("node group %q: MachineDeployment %s: %w", g.id, g.md, errNoPrice(g.priceErr))
	case g.price != nil:
		return *g.price, class, nil
	}
	price, err := p.ix.classPriceLocked(md.Namespace, class)
	if err != nil {
		return autoscaler.Price{}, class, fmt.Errorf("node group %q: %w", g.id, err)
	}
	return price, class, nil
}

// GroupPrice is what a new node of the group costs per hour.
func (p *Source) GroupPrice(id string) (autoscaler.Price, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	g, err := p.groupRLocked(id)
	if err != nil {
		return autoscaler.Price{}, err
	}
	price, _, err := p.groupPriceLocked(g)
	return price, err
}

// NodePrice is what a node of a group costs per hour: its deployment's own price, else its
// machine's class's. A machine deleted lately answers its group's price.
func (p *Source) NodePrice(n autoscaler.Node) (autoscaler.Price, error) {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	m := p.ix.machineForNodeLocked(n)
	if m == nil {
		if t, ok := p.ix.tombstones[driver.ProviderIDKey(n.ID())]; ok {
			if g := p.ix.groups[t.group]; g != nil {
				price, _, err := p.groupPriceLocked(g)
				return price, err
			}
		}
		return autoscaler.Price{}, driver.Errorf(driver.NotFound, "node %q (providerID %q) is not a machine of any node group", n.Name, n.ProviderID)
	}
	g := p.ix.groupOfMachineLocked(m)
	if g == nil {
		return autoscaler.Price{}, driver.Errorf(driver.NotFound, "node %q: machine %s/%s belongs to no node group", n.Name, m.Namespace, m.Name)
	}
	switch {
	case g.priceErr != nil:
		return autoscaler.Price{}, fmt.Errorf("node group %q: MachineDeployment %s: %w", g.id, g.md, errNoPrice(g.priceErr))
	case g.price != nil:
		return *g.price, nil
	}
	price, err := p.ix.classPriceLocked(m.Namespace, m.Spec.Class.Name)
	if err != nil {
		return autoscaler.Price{}, fmt.Errorf("node %q of node group %q: %w", n.Name, g.id, err)
	}
	return price, nil
}

// GroupShapes are the price and template size of a new node of every priced group.
func (p *Source) GroupShapes() []autoscaler.GroupShape {
	p.ix.mu.RLock()
	defer p.ix.mu.RUnlock()
	out := make([]autoscaler.GroupShape, 0, len(p.ix.groups))
	for _, g := range p.ix.groups {
		price, class, err := p.groupPriceLocked(g)
		if err != nil {
			continue
		}
		info := p.ix.classInfo[key{Namespace: g.md.Namespace, Name: class}]
		if info.cpu <= 0 && info.memory <= 0 {
			continue
		}
		out = append(out, autoscaler.GroupShape{Price: price, CPU: info.cpu, Memory: info.memory})
	}
	return out
}
