package fallback

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

// Prices of MachineClasses, and the cost-aware order of a fallback chain.
const (
	// AnnotationPricePerHour on a MachineClass is what one of its machines costs per hour: a
	// non-negative decimal ("0.096"), in any currency as long as every class uses the same one.
	// On a MachineDeployment it overrides the price of the deployment's classes for the Cluster
	// Autoscaler server (one price for the whole node group, whichever class a machine gets).
	AnnotationPricePerHour = "machinist.io/price-per-hour"
	// AnnotationOrder on a MachineDeployment (copied to its MachineSets) or a bare MachineSet
	// says in which order the classes of the fallback chain are tried: OrderPrice tries them
	// cheapest first by AnnotationPricePerHour, OrderListed (the default) as listed, the
	// template's class first.
	AnnotationOrder = "machinist.io/fallback-order"

	// OrderListed tries the template's class, then the fallback classes as listed.
	OrderListed = "list"
	// OrderPrice tries the classes cheapest first; classes without a usable price come last, in
	// listed order.
	OrderPrice = "price"
)

// priceSyntax is the strict form of a price: digits with an optional fraction. No sign,
// exponent, unit, spaces, NaN or infinity: a typo must not become a price.
var priceSyntax = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,12})?$`)

// ParsePrice reads a value of AnnotationPricePerHour. The error says what is wrong and what to
// write instead; it quotes the value, which is never a secret.
func ParsePrice(value string) (float64, error) {
	if !priceSyntax.MatchString(value) {
		return 0, fmt.Errorf("%s=%q is not a price: write the price per hour as a non-negative decimal with a dot, e.g. 0.096 (no sign, exponent, currency or spaces)", AnnotationPricePerHour, value)
	}
	p, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not a price: %w", AnnotationPricePerHour, value, err)
	}
	return p, nil
}

// PriceOf reads the price an object's annotations give: set is false without the annotation,
// err explains a value that does not parse (the object then has no price).
func PriceOf(annotations map[string]string) (price float64, set bool, err error) {
	v, ok := annotations[AnnotationPricePerHour]
	if !ok {
		return 0, false, nil
	}
	p, err := ParsePrice(v)
	if err != nil {
		return 0, true, err
	}
	return p, true, nil
}

// Prices tells the price per hour of a class. Pick orders a price-ordered chain with it when the
// Marks it is given implement it too (the controllers' *Cache does, from the classes it adopts).
type Prices interface {
	Price(namespace, class string) (float64, bool)
}

// orderOf reads AnnotationOrder: byPrice, and a problem for a value it does not know (the chain
// is then tried as listed).
func orderOf(annotations map[string]string) (byPrice bool, problem *Problem) {
	v, ok := annotations[AnnotationOrder]
	if !ok {
		return false, nil
	}
	switch strings.TrimSpace(v) {
	case OrderListed:
		return false, nil
	case OrderPrice:
		return true, nil
	}
	return false, &Problem{Entry: v, Why: fmt.Sprintf("%s=%q is not an order: use %q (cheapest class first, by %s) or %q (as listed); the classes are tried as listed",
		AnnotationOrder, v, OrderPrice, AnnotationPricePerHour, OrderListed)}
}

// ParseAnnotations reads the fallback annotations of a deployment or set in namespace whose
// template class is primary: the chain (AnnotationClasses, ordered by AnnotationOrder) and the
// problems of both. ok is false without AnnotationClasses (no fallback).
func ParseAnnotations(namespace, primary string, annotations map[string]string) (c Chain, problems []Problem, ok bool) {
	v, ok := annotations[AnnotationClasses]
	if !ok {
		return Chain{}, nil, false
	}
	c, problems = Parse(namespace, primary, v)
	byPrice, problem := orderOf(annotations)
	c.ByPrice = byPrice
	if problem != nil {
		problems = append(problems, *problem)
	}
	if byPrice && strings.EqualFold(strings.TrimSpace(annotations[AnnotationRebalance]), "true") {
		problems = append(problems, Problem{Entry: annotations[AnnotationRebalance], Why: fmt.Sprintf(
			"%s is ignored with %s=%s: rebalancing moves machines back to the template's class, which price order does not prefer; remove one of the two",
			AnnotationRebalance, AnnotationOrder, OrderPrice)})
	}
	return c, problems, true
}

// PriceProblems lists the classes of a price-ordered chain that have no usable price, for the
// deployment's FallbackClasses condition; class looks a class up (nil: not found, reported
// elsewhere). A chain in listed order has none.
func PriceProblems(c Chain, class func(name string) *v1alpha1.MachineClass) []Problem {
	if !c.ByPrice {
		return nil
	}
	var out []Problem
	for _, name := range c.Classes {
		cl := class(name)
		if cl == nil {
			continue
		}
		_, set, err := PriceOf(cl.Annotations)
		switch {
		case err != nil:
			out = append(out, Problem{Entry: name, Why: fmt.Sprintf("MachineClass %s/%s: %v; until then it is tried after the priced classes", c.Namespace, name, err)})
		case !set:
			out = append(out, Problem{Entry: name, Why: fmt.Sprintf("MachineClass %s/%s has no %s: set it (e.g. %s: \"0.096\") for %s=%s; until then it is tried after the priced classes",
				c.Namespace, name, AnnotationPricePerHour, AnnotationPricePerHour, AnnotationOrder, OrderPrice)})
		}
	}
	return out
}

// ordered returns the classes of the chain in the order Pick tries them, with usable applied.
// In listed order usable is asked lazily, class by class, as far as the caller reads; in price
// order it is asked for every class first (the controllers' usable adopts the class, and with
// it its price), then the usable classes are sorted cheapest first, classes without a price
// after them in listed order.
func (c Chain) ordered(marks Marks, usable func(string) bool) func(yield func(string) bool) {
	if !c.ByPrice {
		return func(yield func(string) bool) {
			for _, n := range c.Classes {
				if usable != nil && !usable(n) {
					continue
				}
				if !yield(n) {
					return
				}
			}
		}
	}
	type candidate struct {
		name   string
		price  float64
		priced bool
	}
	var cands []candidate
	prices, _ := marks.(Prices)
	for _, n := range c.Classes {
		if usable != nil && !usable(n) {
			continue
		}
		cand := candidate{name: n}
		if prices != nil {
			cand.price, cand.priced = prices.Price(c.Namespace, n)
		}
		cands = append(cands, cand)
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].priced != cands[j].priced {
			return cands[i].priced
		}
		return cands[i].priced && cands[i].price < cands[j].price
	})
	return func(yield func(string) bool) {
		for _, cand := range cands {
			if !yield(cand.name) {
				return
			}
		}
	}
}

// DescribeOrder says how the chain's classes are tried, for the FallbackClasses condition.
func DescribeOrder(c Chain) string {
	if c.ByPrice {
		return "Machines are created on the cheapest class not out of capacity (" + AnnotationPricePerHour + "), of: " + strings.Join(c.Classes, ", ")
	}
	return "Machines are created on the first class not out of capacity, in order: " + strings.Join(c.Classes, ", ")
}
