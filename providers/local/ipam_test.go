package local

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestPodCIDRs(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 255, 256, podCIDRs - 1} {
		cidr := podCIDR(i)
		p := netip.MustParsePrefix(cidr)
		if !podNetwork.Contains(p.Addr()) || p.Bits() != 24 || seen[cidr] {
			t.Fatalf("podCIDR(%d) = %s: not a fresh /24 of %s", i, cidr, podNetwork)
		}
		seen[cidr] = true
		if back := podCIDRIndex(cidr); back != i {
			t.Fatalf("podCIDRIndex(%s) = %d, want %d", cidr, back, i)
		}
	}
	if podCIDR(0) != "100.96.0.0/24" || podCIDR(podCIDRs-1) != "100.127.255.0/24" {
		t.Fatalf("range %s … %s", podCIDR(0), podCIDR(podCIDRs-1))
	}
	for _, bad := range []string{"", "10.0.0.0/24", "100.96.0.0/16", "nonsense"} {
		if i := podCIDRIndex(bad); i != -1 {
			t.Fatalf("podCIDRIndex(%q) = %d, want -1", bad, i)
		}
	}
}

func TestStoresClaimPodCIDRsOnce(t *testing.T) {
	ds, err := newDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]store{"dir": ds, "mem": newMemStore()} {
		t.Run(name, func(t *testing.T) {
			a, err := s.claimPodCIDR("a")
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.claimPodCIDR("b")
			if err != nil || a == b {
				t.Fatalf("claims %d and %d (%v)", a, b, err)
			}
			// Releasing in another machine's name frees nothing.
			if err := s.releasePodCIDR(a, "b"); err != nil {
				t.Fatal(err)
			}
			if err := s.releasePodCIDR(a, "a"); err != nil {
				t.Fatal(err)
			}
			// Claims go round the range: the freed one comes back only after the others.
			if i, err := s.claimPodCIDR("c"); err != nil || i == a || i == b {
				t.Fatalf("claimed %d after freeing %d (held: %d, %v)", i, a, b, err)
			}
		})
	}
}

func TestMemStoreRunsOutOfPodCIDRs(t *testing.T) {
	s := newMemStore()
	a, _ := s.claimPodCIDR("a")
	seen := map[int]bool{a: true}
	for range podCIDRs - 1 {
		i, err := s.claimPodCIDR("x")
		if err != nil || seen[i] {
			t.Fatalf("claim %d twice (%v)", i, err)
		}
		seen[i] = true
	}
	if _, err := s.claimPodCIDR("y"); !errors.Is(err, errNoPodCIDR) {
		t.Fatalf("claim beyond the range: %v, want errNoPodCIDR", err)
	}
	if err := s.releasePodCIDR(a, "a"); err != nil {
		t.Fatal(err)
	}
	if i, err := s.claimPodCIDR("z"); err != nil || i != a {
		t.Fatalf("freed %d, then claimed %d (%v)", a, i, err)
	}
}

func TestIPPool(t *testing.T) {
	if newIPPool("") != nil || newIPPool("10.0.0.0/16") != nil {
		t.Fatal("a pool without a /24")
	}
	p := newIPPool("100.96.3.0/24")
	p.reserve("held", "100.96.3.2")
	p.reserve("outside", "10.1.2.3")
	ips := map[string]types.UID{"100.96.3.2": "held"}
	for i := range 252 {
		uid := types.UID(fmt.Sprint(i))
		ip, ok := p.allocate(uid)
		if !ok {
			t.Fatalf("pool exhausted after %d", i)
		}
		if owner, dup := ips[ip]; dup {
			t.Fatalf("%s handed to %s and %s", ip, owner, uid)
		}
		if again, _ := p.allocate(uid); again != ip {
			t.Fatalf("second allocate for %s: %s, want %s", uid, again, ip)
		}
		ips[ip] = uid
	}
	if _, ok := p.allocate("one-too-many"); ok {
		t.Fatal("more than 253 pod IPs in a /24")
	}
	for ip := range ips {
		a := netip.MustParseAddr(ip).As4()
		if a[3] < 2 || a[3] > 254 {
			t.Fatalf("handed out %s (network, bridge or broadcast address)", ip)
		}
	}
	p.release("held")
	if ip, ok := p.allocate("next"); !ok || ip != "100.96.3.2" {
		t.Fatalf("after a release: %s %v", ip, ok)
	}
	if p.inUse() != 253 {
		t.Fatalf("%d in use", p.inUse())
	}
}
