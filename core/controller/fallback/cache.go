package fallback

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
	"github.com/machinist-io/machinist/internal/truncate"
)

// DefaultTTL is how long a class stays marked exhausted after a ResourceExhausted create
// (--fallback-exhausted-ttl). Karpenter keeps its "unavailable offerings" for 3 minutes
// (UnavailableOfferingsTTL in its pkg/cache): long enough that a stock-out is not hit again at
// once, short enough that a zone that recovers is tried again soon.
const DefaultTTL = 3 * time.Minute

// maxMessage bounds the provider message kept with a mark (it is published on the class and
// quoted in events).
const maxMessage = 512

// Mark is a class marked exhausted: skipped by creates until Until.
type Mark struct {
	Until   time.Time `json:"until"`
	Message string    `json:"message,omitempty"`
}

// Marks tells which classes are marked exhausted now. The Controller's *Cache implements it; the
// Cluster Autoscaler server, a process of its own, reads the marks the controller publishes on
// the MachineClasses (PublishedMark).
type Marks interface {
	Exhausted(namespace, class string) (Mark, bool)
}

type classKey struct{ namespace, name string }

// Cache is the in-memory cache of exhausted classes, shared by every deployment that uses a
// class. It is safe for concurrent use. A restart forgets it, except what the controller adopts
// again from the marks it published on the classes.
type Cache struct {
	ttl    time.Duration
	clock  clock.PassiveClock
	mu     sync.Mutex
	marks  map[classKey]Mark
	prices map[classKey]float64 // AnnotationPricePerHour of the classes adopted, when it parses
}

// NewCache returns a cache whose marks last ttl (DefaultTTL when ttl ≤ 0).
func NewCache(ttl time.Duration) *Cache {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Cache{ttl: ttl, clock: clock.RealClock{}, marks: map[classKey]Mark{}, prices: map[classKey]float64{}}
}

// WithClock makes the marks last ttl by clk instead of the real clock (the controllers' clock,
// a fake one in tests).
func (c *Cache) WithClock(clk clock.PassiveClock) *Cache {
	c.clock = clk
	return c
}

// TTL is how long a mark lasts.
func (c *Cache) TTL() time.Duration { return c.ttl }

// Mark marks a class exhausted for the TTL from now (a later mark extends it) and counts it in
// machinist_fallback_exhausted_marks_total.
func (c *Cache) Mark(namespace, class, message string) Mark {
	m := Mark{Until: c.clock.Now().Add(c.ttl), Message: truncate.String(strings.TrimSpace(message), maxMessage)}
	c.mu.Lock()
	c.marks[classKey{namespace, class}] = m
	c.mu.Unlock()
	exhaustedMarks.WithLabelValues(namespace, class).Inc()
	return m
}

// Exhausted returns the class's mark while it lasts.
func (c *Cache) Exhausted(namespace, class string) (Mark, bool) {
	k := classKey{namespace, class}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.marks[k]
	if !ok {
		return Mark{}, false
	}
	if !c.clock.Now().Before(m.Until) {
		delete(c.marks, k)
		return Mark{}, false
	}
	return m, true
}

// Clear lifts a class's mark (a create on it succeeded); it reports whether there was one.
func (c *Cache) Clear(namespace, class string) bool {
	k := classKey{namespace, class}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.marks[k]
	delete(c.marks, k)
	return ok
}

// Adopt takes over what a class publishes for the fallback: its price (AnnotationPricePerHour,
// forgotten when it is removed or does not parse), and a mark published on it (by this
// controller before a restart, or by another replica) unless the cache knows a later one.
// Expired marks are ignored. The controllers adopt every class of a chain before they Pick, so
// a price-ordered chain is sorted by the classes as stored.
func (c *Cache) Adopt(class *v1alpha1.MachineClass) {
	k := classKey{class.Namespace, class.Name}
	price, set, err := PriceOf(class.Annotations)
	pm, marked := PublishedMark(class, c.clock.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	if set && err == nil {
		c.prices[k] = price
	} else {
		delete(c.prices, k)
	}
	if !marked {
		return
	}
	if cur, ok := c.marks[k]; ok && !cur.Until.Before(pm.Until) {
		return
	}
	c.marks[k] = pm
}

// Price is the price per hour of a class adopted last with a price that parses.
func (c *Cache) Price(namespace, class string) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.prices[classKey{namespace, class}]
	return p, ok
}

var (
	_ Marks  = (*Cache)(nil)
	_ Prices = (*Cache)(nil)
)

// Encode is the value of AnnotationExhausted for a mark.
func (m Mark) Encode() string {
	b, _ := json.Marshal(Mark{Until: m.Until.UTC().Truncate(time.Second), Message: m.Message})
	return string(b)
}

// PublishedMark reads the mark published on a class, if it lasts beyond now.
func PublishedMark(class *v1alpha1.MachineClass, now time.Time) (Mark, bool) {
	if class == nil {
		return Mark{}, false
	}
	raw := class.Annotations[AnnotationExhausted]
	if raw == "" {
		return Mark{}, false
	}
	var m Mark
	if err := json.Unmarshal([]byte(raw), &m); err != nil || !now.Before(m.Until) {
		return Mark{}, false
	}
	return m, true
}

// Pick returns the first class of the chain that is not marked and that usable accepts (nil
// accepts every class), with the marks of the classes it passed over. ok is false when no class
// is left: every usable class is marked. A chain ByPrice is tried cheapest first, by the prices
// marks knows when it implements Prices (without, as listed).
func Pick(c Chain, marks Marks, usable func(class string) bool) (class string, skipped map[string]Mark, ok bool) {
	skipped = map[string]Mark{}
	for n := range c.ordered(marks, usable) {
		if m, marked := marks.Exhausted(c.Namespace, n); marked {
			skipped[n] = m
			continue
		}
		return n, skipped, true
	}
	return "", skipped, false
}

// Describe lists marks for messages: "a (out of capacity until 10:04:05: msg), b (...)".
func Describe(order []string, marks map[string]Mark) string {
	var parts []string
	for _, n := range order {
		m, ok := marks[n]
		if !ok {
			continue
		}
		s := n + " (out of capacity until " + m.Until.UTC().Format(time.TimeOnly)
		if m.Message != "" {
			s += ": " + m.Message
		}
		parts = append(parts, s+")")
	}
	return strings.Join(parts, ", ")
}
