package local

import (
	"errors"
	"net/netip"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Pod networking of local nodes, laid out as Gardener does by default: pods live in
// 100.96.0.0/11 and every node gets a /24 of it as spec.podCIDR (so 8192 nodes per state dir,
// and at most 253 pod IPs per node; more pods on a node stay Pending, as with an exhausted CNI
// range). Host-network pods use the node's InternalIP.
var podNetwork = netip.MustParsePrefix("100.96.0.0/11")

const (
	// podCIDRs is how many /24s podNetwork holds.
	podCIDRs = 1 << (24 - 11)
	// podCIDRBits is the prefix length of a node's pod CIDR.
	podCIDRBits = 24
)

var errNoPodCIDR = errors.New("no pod CIDR left")

// podCIDR returns the index-th /24 of podNetwork.
func podCIDR(index int) string {
	b := podNetwork.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 + uint32(index)<<8
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), 0}), podCIDRBits).String()
}

// ipPool hands out the pod IPs of one node's /24 (.2 to .254; .1 is the node's bridge), one per
// pod UID. The pod tracker reserves the IPs pods already have before it starts pods, so a
// restarted process never hands out an IP twice.
type ipPool struct {
	prefix netip.Prefix

	mu    sync.Mutex
	byUID map[types.UID]uint8
	used  [4]uint64 // one bit per host address: 32 bytes per node
	next  uint8     // where the search for a free address starts: no immediate reuse
}

func (p *ipPool) taken(host uint8) bool { return p.used[host/64]&(1<<(host%64)) != 0 }
func (p *ipPool) set(host uint8, on bool) {
	if on {
		p.used[host/64] |= 1 << (host % 64)
	} else {
		p.used[host/64] &^= 1 << (host % 64)
	}
}

// newIPPool returns the pool of a node's pod CIDR, or nil when it has none.
func newIPPool(cidr string) *ipPool {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() || p.Bits() != podCIDRBits {
		return nil
	}
	return &ipPool{prefix: p.Masked(), next: 2}
}

func (p *ipPool) addr(host uint8) string {
	b := p.prefix.Addr().As4()
	b[3] = host
	return netip.AddrFrom4(b).String()
}

// reserve records that uid holds ip (seen in its status); an IP outside the pool is ignored.
func (p *ipPool) reserve(uid types.UID, ip string) {
	a, err := netip.ParseAddr(ip)
	if err != nil || !p.prefix.Contains(a) {
		return
	}
	host := a.As4()[3]
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byUID[uid]; ok || p.taken(host) {
		return
	}
	if p.byUID == nil {
		p.byUID = map[types.UID]uint8{}
	}
	p.byUID[uid] = host
	p.set(host, true)
}

// allocate returns the IP of uid, assigning a free one first; false when the pool is exhausted.
func (p *ipPool) allocate(uid types.UID) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if host, ok := p.byUID[uid]; ok {
		return p.addr(host), true
	}
	for range 253 {
		host := p.next
		p.next++
		if p.next < 2 || p.next == 255 {
			p.next = 2
		}
		if !p.taken(host) {
			if p.byUID == nil {
				p.byUID = map[types.UID]uint8{}
			}
			p.set(host, true)
			p.byUID[uid] = host
			return p.addr(host), true
		}
	}
	return "", false
}

// release frees the IP of uid, if any.
func (p *ipPool) release(uid types.UID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if host, ok := p.byUID[uid]; ok {
		delete(p.byUID, uid)
		p.set(host, false)
	}
}

func (p *ipPool) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byUID)
}

// podCIDRIndex is the inverse of podCIDR; -1 for a CIDR outside podNetwork.
func podCIDRIndex(cidr string) int {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || p.Bits() != podCIDRBits || !podNetwork.Contains(p.Addr()) {
		return -1
	}
	b, base := p.Addr().As4(), podNetwork.Addr().As4()
	return int(b[1]-base[1])<<8 | int(b[2])
}
