package machineclaim

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
)

// staticPool returns the template's static addresses, or nil with DHCP.
func staticPool(t *hypervisorv1alpha1.HypervisorMachineTemplate) []string {
	n := t.Spec.Network
	if n == nil || n.IPv4 == nil || n.IPv4.Mode != hypervisorv1alpha1.IPAddressStatic {
		return nil
	}
	return n.IPv4.Addresses
}

// addressHolders maps each address of the pool to the claims of the same
// template that recorded it (live claims only: a Terminated claim's machine
// is gone, so its address is free again). It reads the cache, or, with
// fresh, the API server itself.
func (r *Reconciler) addressHolders(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, fresh bool) (map[string][]hypervisorv1alpha1.MachineClaim, error) {
	var list hypervisorv1alpha1.MachineClaimList
	var err error
	if fresh {
		// The API server has no index of templateRef: filter below.
		err = r.APIReader.List(ctx, &list, client.InNamespace(c.Namespace))
	} else {
		err = r.Client.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingFields{templateRefIndex: c.Spec.TemplateRef.Name})
	}
	if err != nil {
		return nil, err
	}
	holders := map[string][]hypervisorv1alpha1.MachineClaim{}
	for _, other := range list.Items {
		if other.Spec.TemplateRef != c.Spec.TemplateRef || other.Status.AssignedAddress == "" ||
			other.Status.Phase == hypervisorv1alpha1.MachineTerminated || other.Status.Phase == hypervisorv1alpha1.MachineFailed {
			continue
		}
		holders[other.Status.AssignedAddress] = append(holders[other.Status.AssignedAddress], other)
	}
	return holders, nil
}

// assignAddress takes the first free address of the pool for c.
func (r *Reconciler) assignAddress(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, pool []string) error {
	holders, err := r.addressHolders(ctx, c, false)
	if err != nil {
		return err
	}
	for _, a := range pool {
		if len(holders[a]) == 0 {
			c.Status.AssignedAddress = a
			return nil
		}
	}
	return fmt.Errorf("all %d addresses of the template's spec.network.ipv4.addresses are taken: add addresses or retire machines", len(pool))
}

// addressConflict reports whether an older claim holds c's address too (two
// claims that chose at once from a cache that had not seen the other); the
// newer one gives its address up and chooses again. It asks the API server,
// not the cache: a cache that lags the other claim's write (a busy
// manager) would let both keep the address.
func (r *Reconciler) addressConflict(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (bool, error) {
	holders, err := r.addressHolders(ctx, c, true)
	if err != nil {
		return false, err
	}
	for _, other := range holders[c.Status.AssignedAddress] {
		if other.UID == c.UID {
			continue
		}
		if other.CreationTimestamp.Before(&c.CreationTimestamp) ||
			(other.CreationTimestamp.Equal(&c.CreationTimestamp) && other.Name < c.Name) {
			return true, nil
		}
	}
	return false, nil
}
