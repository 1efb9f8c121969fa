package kubevirtsim

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// ipam hands out guest addresses from the pod CIDR the way the host-local
// IPAM plugin does: in order after the last one given, so an address freed
// by a stopped VMI is not handed straight to the next one, and every live
// VMI's addresses are unique. Callers hold Simulator.mu.
type ipam struct {
	base  uint32 // the network address
	size  uint32 // addresses in the CIDR
	next  uint32 // offset to try first
	used  map[uint32]types.UID
	byUID map[types.UID][]uint32
}

func newIPAM(cidr string) (*ipam, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, err
	}
	prefix = prefix.Masked()
	if !prefix.Addr().Is4() || prefix.Bits() < 8 || prefix.Bits() > 30 {
		return nil, fmt.Errorf("pod CIDR %s: want an IPv4 network from /8 to /30", cidr)
	}
	a := prefix.Addr().As4()
	return &ipam{
		base:  binary.BigEndian.Uint32(a[:]),
		size:  uint32(1) << (32 - prefix.Bits()),
		next:  1,
		used:  map[uint32]types.UID{},
		byUID: map[types.UID][]uint32{},
	}, nil
}

// usable reports whether an offset is a host address worth handing out:
// neither the network's nor its broadcast address, nor one ending in .0 or
// .255, which look wrong to people reading a listing.
func (p *ipam) usable(off uint32) bool {
	if off == 0 || off >= p.size-1 {
		return false
	}
	last := (p.base + off) & 0xff
	return last != 0 && last != 0xff
}

// allocate returns n addresses for the VMI with this UID, reusing the ones it
// already holds.
func (p *ipam) allocate(uid types.UID, n int) ([]string, error) {
	held := p.byUID[uid]
	for len(held) < n {
		found := false
		for i := uint32(0); i < p.size; i++ {
			off := (p.next + i) % p.size
			if !p.usable(off) {
				continue
			}
			if _, taken := p.used[off]; taken {
				continue
			}
			p.used[off] = uid
			held = append(held, off)
			p.next = (off + 1) % p.size
			found = true
			break
		}
		if !found {
			p.byUID[uid] = held
			return nil, fmt.Errorf("pod network exhausted: %d addresses in use", len(p.used))
		}
	}
	p.byUID[uid] = held
	return p.strings(held[:n]), nil
}

// reserve records addresses a VMI already reports, so a simulator started
// against existing VMIs never hands them out twice. Addresses outside the
// CIDR or held by another VMI are ignored.
func (p *ipam) reserve(uid types.UID, addrs []string) {
	if len(p.byUID[uid]) > 0 {
		return
	}
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			continue
		}
		b := a.As4()
		off := binary.BigEndian.Uint32(b[:]) - p.base
		if off >= p.size {
			continue
		}
		if owner, taken := p.used[off]; taken && owner != uid {
			continue
		}
		p.used[off] = uid
		p.byUID[uid] = append(p.byUID[uid], off)
	}
}

// release frees the VMI's addresses.
func (p *ipam) release(uid types.UID) {
	for _, off := range p.byUID[uid] {
		delete(p.used, off)
	}
	delete(p.byUID, uid)
}

func (p *ipam) strings(offs []uint32) []string {
	out := make([]string, len(offs))
	for i, off := range offs {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], p.base+off)
		out[i] = netip.AddrFrom4(b).String()
	}
	return out
}

// macFor derives a guest MAC from its IPv4 address: QEMU's 52:54:00 prefix and
// the address's low three bytes, unique wherever the addresses are.
func macFor(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return "52:54:00:00:00:01"
	}
	b := a.As4()
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[1], b[2], b[3])
}

// nodeLabels are the labels every simulated node carries, the ones a VMI's
// nodeSelector is matched against.
func nodeLabels(name string) map[string]string {
	return map[string]string{
		"kubernetes.io/hostname":  name,
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      "amd64",
		"kubevirt.io/schedulable": "true",
	}
}

// pickNode returns the least-loaded node whose labels satisfy selector, the
// first in nodes order on a tie, or "" when none does.
func pickNode(nodes []string, load map[string]int, selector map[string]string) string {
	best, bestLoad := "", 0
	for _, n := range nodes {
		if !matches(nodeLabels(n), selector) {
			continue
		}
		if best == "" || load[n] < bestLoad {
			best, bestLoad = n, load[n]
		}
	}
	return best
}

func matches(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// sortedKeys returns a map's keys in order, for stable messages.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
