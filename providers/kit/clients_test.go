package kit_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/machinist-io/machinist/providers/kit"
)

func TestGetBuildsOncePerKeyAndReuses(t *testing.T) {
	c := kit.NewClients[*int](4)
	var builds atomic.Int32
	build := func() (*int, error) {
		n := int(builds.Add(1))
		return &n, nil
	}
	first, err := c.Get("a", build)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Get("a", build)
	if err != nil {
		t.Fatal(err)
	}
	if first != again || builds.Load() != 1 {
		t.Fatalf("second Get of a key built again (builds %d) or returned another client", builds.Load())
	}
}

func TestConcurrentCallersOfOneKeyShareOneBuild(t *testing.T) {
	c := kit.NewClients[int](4)
	var builds atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	got := make([]int, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = c.Get("k", func() (int, error) {
				<-release
				return int(builds.Add(1)), nil
			})
		}()
	}
	close(release)
	wg.Wait()
	if builds.Load() != 1 {
		t.Fatalf("%d builds for one key, want 1", builds.Load())
	}
	for i, v := range got {
		if v != 1 {
			t.Fatalf("caller %d got %d, want the one build's 1", i, v)
		}
	}
}

func TestFailedBuildIsNotKept(t *testing.T) {
	c := kit.NewClients[string](4)
	boom := errors.New("bad credentials")
	if _, err := c.Get("k", func() (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("Get: %v, want the build's error", err)
	}
	v, err := c.Get("k", func() (string, error) { return "ok", nil })
	if err != nil || v != "ok" {
		t.Fatalf("Get after a failed build: %q, %v; want a fresh build", v, err)
	}
}

func TestLeastRecentlyUsedAgeOut(t *testing.T) {
	c := kit.NewClients[string](2)
	builds := map[string]int{}
	get := func(k string) {
		t.Helper()
		if _, err := c.Get(k, func() (string, error) { builds[k]++; return k, nil }); err != nil {
			t.Fatal(err)
		}
	}
	get("a")
	get("b")
	get("a") // a is now the most recently used
	get("c") // evicts b
	if c.Len() != 2 {
		t.Fatalf("Len %d, want 2", c.Len())
	}
	get("a")
	get("b")
	if fmt.Sprint(builds) != "map[a:1 b:2 c:1]" {
		t.Fatalf("builds %v: want a kept, b evicted and built again", builds)
	}
}

// TestKeyTellsFieldBoundaries: the same bytes split differently are different credentials, and
// the key reveals none of them.
func TestKeyTellsFieldBoundaries(t *testing.T) {
	if kit.CredentialKey("ab", "c") == kit.CredentialKey("a", "bc") || kit.CredentialKey("a", "") == kit.CredentialKey("", "a") {
		t.Fatal("fields split differently gave one key")
	}
	fields := []string{"id", "s3cr3t"}
	if kit.CredentialKey(fields...) != kit.CredentialKey(slices.Clone(fields)...) {
		t.Fatal("the same fields gave two keys")
	}
	if k := kit.CredentialKey("id", "s3cr3t"); strings.Contains(k, "s3cr3t") || len(k) != 64 {
		t.Fatalf("key %q", k)
	}
}
