package providers

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Dialer is the dialer of every connection to an endpoint an object names
// (a HypervisorCluster's endpoint or kubeconfig server, a RunnerPool's
// apiURL, Supabase): bounded by DialTimeout, and refusing addresses no
// hypervisor or GitHub lives at — link-local ones, where cloud metadata
// services hand out the node's credentials (169.254.169.254), and
// unspecified or multicast ones. The check runs on the address actually
// dialled, after name resolution, so a name that resolves there is refused
// too.
func Dialer() *net.Dialer {
	return &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second, Control: refuseReserved}
}

// refuseReserved is a net.Dialer Control: it runs before each connect.
func refuseReserved(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil // not an IP: nothing to judge
	}
	ip = ip.Unmap()
	switch {
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("refusing to connect to %s: a link-local address, where cloud metadata services answer, is never a hypervisor or GitHub endpoint", address)
	case ip.IsUnspecified(), ip.IsMulticast():
		return fmt.Errorf("refusing to connect to %s: not an address an endpoint can have", address)
	}
	return nil
}
