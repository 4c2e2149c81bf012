package fallback

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/machinist-io/machinist/core/apis/machine/v1alpha1"
)

func TestParse(t *testing.T) {
	cases := []struct {
		value    string
		classes  []string
		problems []string // "position:entry:part of why"
	}{
		{"b,c", []string{"a", "b", "c"}, nil},
		{" b , ns/c ", []string{"a", "b", "c"}, nil},
		{"b,,c", []string{"a", "b", "c"}, []string{`2::extra comma`}},
		{"", []string{"a"}, []string{`1::list is empty`}},
		{"b,other/c", []string{"a", "b"}, []string{`2:other/c:namespace "other"`}},
		{"b,b", []string{"a", "b"}, []string{`2:b:listed twice`}},
		{"b,a", []string{"a", "b"}, []string{`2:a:a cycle`}},
		{"ns/x/y", []string{"a"}, []string{`1:ns/x/y:not a MachineClass name`}},
	}
	for _, tc := range cases {
		chain, problems := Parse("ns", "a", tc.value)
		if !reflect.DeepEqual(chain.Classes, tc.classes) || chain.Namespace != "ns" {
			t.Errorf("Parse(%q) classes %v, want %v", tc.value, chain.Classes, tc.classes)
		}
		if len(problems) != len(tc.problems) {
			t.Errorf("Parse(%q) problems %v, want %v", tc.value, problems, tc.problems)
			continue
		}
		for i, want := range tc.problems {
			parts := strings.SplitN(want, ":", 3)
			p := problems[i]
			if got := strings.Join([]string{itoa(p.Position), p.Entry}, ":"); got != parts[0]+":"+parts[1] || !strings.Contains(p.Why, parts[2]) {
				t.Errorf("Parse(%q) problem %d = %s, want %s", tc.value, i, p, want)
			}
			if !strings.Contains(p.String(), "entry "+parts[0]) {
				t.Errorf("problem text %q does not name the entry's position", p)
			}
		}
	}
	if got := Position("ns", "b, ns/c", "c"); got != 2 {
		t.Errorf("Position = %d, want 2", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestCacheMarksExpireAndClear(t *testing.T) {
	now := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	clk := testclock.NewFakePassiveClock(now)
	c := NewCache(time.Minute).WithClock(clk)
	if _, ok := c.Exhausted("ns", "a"); ok {
		t.Fatal("an unmarked class is exhausted")
	}
	m := c.Mark("ns", "a", "  no capacity in zone-1 ")
	if !m.Until.Equal(now.Add(time.Minute)) || m.Message != "no capacity in zone-1" {
		t.Fatalf("mark = %+v", m)
	}
	if _, ok := c.Exhausted("other", "a"); ok {
		t.Fatal("a mark crossed namespaces")
	}
	clk.SetTime(now.Add(59 * time.Second))
	if _, ok := c.Exhausted("ns", "a"); !ok {
		t.Fatal("mark gone before its TTL")
	}
	clk.SetTime(now.Add(time.Minute))
	if _, ok := c.Exhausted("ns", "a"); ok {
		t.Fatal("mark outlived its TTL")
	}
	c.Mark("ns", "a", "again")
	if !c.Clear("ns", "a") || c.Clear("ns", "a") {
		t.Fatal("Clear must report the mark once")
	}
	long := c.Mark("ns", "b", strings.Repeat("x", 2000))
	if len(long.Message) != maxMessage {
		t.Fatalf("message not truncated: %d", len(long.Message))
	}
}

func TestPublishedMarkRoundTripAndAdopt(t *testing.T) {
	now := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	class := &v1alpha1.MachineClass{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	if _, ok := PublishedMark(class, now); ok {
		t.Fatal("a class without the annotation has a mark")
	}
	class.Annotations = map[string]string{AnnotationExhausted: Mark{Until: now.Add(time.Minute), Message: "quota"}.Encode()}
	m, ok := PublishedMark(class, now)
	if !ok || m.Message != "quota" || !m.Until.Equal(now.Add(time.Minute)) {
		t.Fatalf("published mark = %+v, %v", m, ok)
	}
	if _, ok := PublishedMark(class, now.Add(time.Minute)); ok {
		t.Fatal("an expired published mark counts")
	}
	class.Annotations[AnnotationExhausted] = "{not json"
	if _, ok := PublishedMark(class, now); ok {
		t.Fatal("an unreadable annotation counts as a mark")
	}

	c := NewCache(time.Minute).WithClock(testclock.NewFakePassiveClock(now))
	class.Annotations[AnnotationExhausted] = Mark{Until: now.Add(30 * time.Second), Message: "old"}.Encode()
	c.Adopt(class)
	if got, ok := c.Exhausted("ns", "a"); !ok || got.Message != "old" {
		t.Fatalf("adopted mark = %+v, %v", got, ok)
	}
	c.Mark("ns", "a", "new") // lasts longer than the published one
	c.Adopt(class)
	if got, _ := c.Exhausted("ns", "a"); got.Message != "new" {
		t.Fatalf("Adopt replaced a later mark: %+v", got)
	}
}

func TestPickAndDescribe(t *testing.T) {
	now := time.Date(2025, 1, 1, 10, 0, 0, 0, time.UTC)
	c := NewCache(time.Minute).WithClock(testclock.NewFakePassiveClock(now))
	chain := Chain{Namespace: "ns", Classes: []string{"a", "b", "c"}}
	if got, _, ok := Pick(chain, c, nil); !ok || got != "a" {
		t.Fatalf("Pick = %q, %v; want the primary", got, ok)
	}
	c.Mark("ns", "a", "zone-1 full")
	got, skipped, ok := Pick(chain, c, func(n string) bool { return n != "b" })
	if !ok || got != "c" || len(skipped) != 1 {
		t.Fatalf("Pick = %q %v %v; want c, skipping marked a and unusable b", got, skipped, ok)
	}
	c.Mark("ns", "c", "zone-3 full")
	if _, skipped, ok = Pick(chain, c, func(n string) bool { return n != "b" }); ok || len(skipped) != 2 {
		t.Fatalf("Pick with every usable class marked = %v, %v", skipped, ok)
	}
	d := Describe(chain.Classes, skipped)
	if !strings.Contains(d, "a (out of capacity until 10:01:00: zone-1 full)") || !strings.Contains(d, "c (") || strings.Contains(d, "b (") {
		t.Fatalf("Describe = %q", d)
	}
}

func TestOnFallbackAndTemplateClass(t *testing.T) {
	ms := &v1alpha1.MachineSet{}
	ms.Spec.MachineClass.Name = "a"
	if TemplateClass(ms) != "a" {
		t.Fatal("TemplateClass ignores spec.machineClass")
	}
	ms.Spec.Template.Spec.Class.Name = "a"
	m := &v1alpha1.Machine{}
	m.Spec.Class.Name = "b"
	if OnFallback(m, ms) {
		t.Fatal("a set without fallback classes has no fallback machines")
	}
	ms.Annotations = map[string]string{AnnotationClasses: "b"}
	if !OnFallback(m, ms) {
		t.Fatal("machine on b is not seen on a fallback")
	}
	m.Spec.Class.Name = "a"
	if OnFallback(m, ms) {
		t.Fatal("machine on the primary is seen on a fallback")
	}
	if chain, _, ok := ChainOf(ms); !ok || !chain.Contains("b") || chain.Primary() != "a" {
		t.Fatalf("ChainOf = %+v %v", chain, ok)
	}
	ms.Annotations[AnnotationRebalance] = " True"
	if !RebalanceEnabled(ms) {
		t.Fatal("rebalance annotation not read")
	}
}
