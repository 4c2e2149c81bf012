package fallback

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestParsePrice(t *testing.T) {
	good := map[string]float64{"0": 0, "0.096": 0.096, "12": 12, "3.50": 3.5, "000.1": 0.1}
	for v, want := range good {
		got, err := ParsePrice(v)
		if err != nil || got != want {
			t.Errorf("ParsePrice(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", " 0.1", "0.1 ", "-1", "+1", "1e3", ".5", "5.", "0,5", "NaN", "Inf", "1.2.3", "$0.10", "0.10 EUR", "0x10", "1234567890123"} {
		_, err := ParsePrice(v)
		if err == nil {
			t.Errorf("ParsePrice(%q) accepted", v)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, AnnotationPricePerHour) || !strings.Contains(msg, "e.g. 0.096") {
			t.Errorf("ParsePrice(%q) error %q names neither the annotation nor what to write", v, msg)
		}
	}
}

func TestPriceOf(t *testing.T) {
	if _, set, err := PriceOf(nil); set || err != nil {
		t.Errorf("no annotation: set %v, err %v", set, err)
	}
	if p, set, err := PriceOf(map[string]string{AnnotationPricePerHour: "0.25"}); !set || err != nil || p != 0.25 {
		t.Errorf("0.25: %v %v %v", p, set, err)
	}
	if _, set, err := PriceOf(map[string]string{AnnotationPricePerHour: "cheap"}); !set || err == nil {
		t.Errorf("a bad value: set %v, err %v; want set with an error", set, err)
	}
}

func TestParseAnnotationsOrder(t *testing.T) {
	cases := []struct {
		name     string
		ann      map[string]string
		ok       bool
		byPrice  bool
		problems []string // parts of each problem's text
	}{
		{"no fallback", map[string]string{AnnotationOrder: OrderPrice}, false, false, nil},
		{"listed by default", map[string]string{AnnotationClasses: "b"}, true, false, nil},
		{"listed", map[string]string{AnnotationClasses: "b", AnnotationOrder: "list"}, true, false, nil},
		{"price", map[string]string{AnnotationClasses: "b", AnnotationOrder: " price "}, true, true, nil},
		{"unknown order", map[string]string{AnnotationClasses: "b", AnnotationOrder: "cheapest"}, true, false,
			[]string{AnnotationOrder + `="cheapest" is not an order`}},
		{"price and rebalance", map[string]string{AnnotationClasses: "b", AnnotationOrder: "price", AnnotationRebalance: "true"}, true, true,
			[]string{AnnotationRebalance + " is ignored"}},
		{"list problems first", map[string]string{AnnotationClasses: "b,b", AnnotationOrder: "x"}, true, false,
			[]string{"listed twice", "is not an order"}},
	}
	for _, tc := range cases {
		c, problems, ok := ParseAnnotations("ns", "a", tc.ann)
		if ok != tc.ok || c.ByPrice != tc.byPrice {
			t.Errorf("%s: ok %v byPrice %v, want %v %v", tc.name, ok, c.ByPrice, tc.ok, tc.byPrice)
		}
		if len(problems) != len(tc.problems) {
			t.Errorf("%s: problems %v, want %v", tc.name, problems, tc.problems)
			continue
		}
		for i, want := range tc.problems {
			if !strings.Contains(problems[i].String(), want) {
				t.Errorf("%s: problem %d %q lacks %q", tc.name, i, problems[i], want)
			}
		}
	}
	ms := &v1alpha1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Annotations: map[string]string{
		AnnotationClasses: "b", AnnotationOrder: OrderPrice, AnnotationRebalance: "true"}}}
	ms.Spec.Template.Spec.Class.Name = "a"
	if c, _, ok := ChainOf(ms); !ok || !c.ByPrice || !reflect.DeepEqual(c.Classes, []string{"a", "b"}) {
		t.Errorf("ChainOf = %+v, %v", c, ok)
	}
	if RebalanceEnabled(ms) {
		t.Error("rebalancing is on under price order")
	}
	delete(ms.Annotations, AnnotationOrder)
	if !RebalanceEnabled(ms) {
		t.Error("rebalancing is off in listed order")
	}
}

// priced is Marks and Prices from maps.
type priced struct {
	marks  map[string]Mark
	prices map[string]float64
}

func (p priced) Exhausted(_, class string) (Mark, bool) { m, ok := p.marks[class]; return m, ok }
func (p priced) Price(_, class string) (float64, bool)  { v, ok := p.prices[class]; return v, ok }

// marksOnly implements Marks but not Prices.
type marksOnly struct{ p priced }

func (m marksOnly) Exhausted(ns, class string) (Mark, bool) { return m.p.Exhausted(ns, class) }

func TestPickByPrice(t *testing.T) {
	until := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	prices := map[string]float64{"primary": 0.30, "cheap": 0.05, "mid": 0.10, "free": 0}
	cases := []struct {
		name    string
		classes []string
		byPrice bool
		marked  []string
		usable  []string // nil: every class
		noPrice bool     // marks without Prices
		want    string
		ok      bool
	}{
		{"listed order ignores prices", []string{"primary", "cheap", "mid"}, false, nil, nil, false, "primary", true},
		{"cheapest first", []string{"primary", "mid", "cheap"}, true, nil, nil, false, "cheap", true},
		{"zero is a price", []string{"primary", "cheap", "free"}, true, nil, nil, false, "free", true},
		{"the cheapest with capacity", []string{"primary", "mid", "cheap"}, true, []string{"cheap"}, nil, false, "mid", true},
		{"the cheapest usable", []string{"primary", "mid", "cheap"}, true, nil, []string{"primary", "mid"}, false, "mid", true},
		{"unpriced after priced", []string{"unpriced", "primary", "other"}, true, nil, nil, false, "primary", true},
		{"unpriced in listed order", []string{"unpriced", "primary", "other"}, true, []string{"primary"}, nil, false, "unpriced", true},
		{"all marked", []string{"primary", "cheap"}, true, []string{"primary", "cheap"}, nil, false, "", false},
		{"no prices known: as listed", []string{"primary", "mid", "cheap"}, true, nil, nil, true, "primary", true},
	}
	for _, tc := range cases {
		p := priced{marks: map[string]Mark{}, prices: prices}
		for _, n := range tc.marked {
			p.marks[n] = Mark{Until: until, Message: "out"}
		}
		var usable func(string) bool
		if tc.usable != nil {
			usable = func(n string) bool {
				for _, u := range tc.usable {
					if u == n {
						return true
					}
				}
				return false
			}
		}
		var marks Marks = p
		if tc.noPrice {
			marks = marksOnly{p}
		}
		got, skipped, ok := Pick(Chain{Namespace: "ns", Classes: tc.classes, ByPrice: tc.byPrice}, marks, usable)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: Pick = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
		for n := range skipped {
			if _, marked := p.marks[n]; !marked {
				t.Errorf("%s: skipped %q, which is not marked", tc.name, n)
			}
		}
	}
}

// The controllers' cache learns prices from the classes it adopts, and forgets one that is
// removed or no longer parses.
func TestCacheAdoptsPrices(t *testing.T) {
	clk := testclock.NewFakePassiveClock(time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC))
	c := NewCache(time.Minute).WithClock(clk)
	class := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Annotations: map[string]string{AnnotationPricePerHour: "0.2"}}}
	if _, ok := c.Price("ns", "a"); ok {
		t.Fatal("a price before adoption")
	}
	c.Adopt(class)
	if p, ok := c.Price("ns", "a"); !ok || p != 0.2 {
		t.Fatalf("Price = %v, %v", p, ok)
	}
	class.Annotations[AnnotationPricePerHour] = "0.2 USD"
	c.Adopt(class)
	if _, ok := c.Price("ns", "a"); ok {
		t.Fatal("a price that no longer parses is still known")
	}
	class.Annotations[AnnotationPricePerHour] = "0.3"
	c.Adopt(class)
	delete(class.Annotations, AnnotationPricePerHour)
	c.Adopt(class)
	if _, ok := c.Price("ns", "a"); ok {
		t.Fatal("a removed price is still known")
	}
	// Adopting still takes over a published mark.
	class.Annotations[AnnotationExhausted] = Mark{Until: clk.Now().Add(time.Minute), Message: "m"}.Encode()
	c.Adopt(class)
	if _, ok := c.Exhausted("ns", "a"); !ok {
		t.Fatal("the published mark was not adopted")
	}
}

func TestPriceProblems(t *testing.T) {
	classes := map[string]*v1alpha1.MachineClass{
		"a": {ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{AnnotationPricePerHour: "0.1"}}},
		"b": {ObjectMeta: metav1.ObjectMeta{Name: "b"}},
		"c": {ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{AnnotationPricePerHour: "ten"}}},
	}
	lookup := func(n string) *v1alpha1.MachineClass { return classes[n] }
	chain := Chain{Namespace: "ns", Classes: []string{"a", "b", "c", "gone"}}
	if p := PriceProblems(chain, lookup); p != nil {
		t.Fatalf("listed order: %v", p)
	}
	chain.ByPrice = true
	p := PriceProblems(chain, lookup)
	if len(p) != 2 || p[0].Entry != "b" || p[1].Entry != "c" {
		t.Fatalf("problems %v, want b and c", p)
	}
	if !strings.Contains(p[0].String(), "has no "+AnnotationPricePerHour) || !strings.Contains(p[1].String(), `"ten" is not a price`) {
		t.Errorf("problem texts: %q; %q", p[0], p[1])
	}
	if got := DescribeOrder(chain); !strings.Contains(got, "cheapest class") || !strings.Contains(got, "a, b, c, gone") {
		t.Errorf("DescribeOrder = %q", got)
	}
}
