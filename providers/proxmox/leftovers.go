package proxmox

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers"
)

// KindCloudInitISO is the Leftover kind of a cloud-init ISO.
const KindCloudInitISO = "cloudinit-iso"

var _ providers.LeftoverCleaner = (*Provider)(nil)

// Leftovers lists the cloud-init ISOs, on the cloud-init storage of every
// online node, whose VMID no VM holds: this installation's by name, and
// those made before installations (Installation ""). An ISO whose VMID is
// held, even by a VM not ours, is left alone: it may be the upload of a
// machine still being configured.
func (p *Provider) Leftovers(ctx context.Context) ([]providers.Leftover, error) {
	rs, err := p.resources(ctx)
	if err != nil {
		return nil, err
	}
	held := map[int]bool{}
	var nodes []string
	for _, r := range rs {
		switch {
		case r == nil:
		case r.Type == "qemu" || r.Type == "lxc":
			held[int(r.VMID)] = true //nolint:gosec // VMIDs fit int
		case r.Type == "node" && r.Status == "online":
			nodes = append(nodes, r.Node)
		}
	}
	var out []providers.Leftover
	seen := map[string]bool{}
	var errs []error
	for _, node := range nodes {
		volids, err := p.isoVolumes(ctx, node)
		if err != nil {
			// Not every node need have the storage: a node that cannot list
			// it holds none of our ISOs.
			errs = append(errs, err)
			continue
		}
		for _, volid := range volids {
			_, file, _ := strings.Cut(volid, ":iso/")
			inst, vmid, ok := parseISO(file)
			if !ok || seen[volid] || held[vmid] || (inst != "" && inst != p.cfg.Installation) {
				continue
			}
			seen[volid] = true // a shared storage shows the same ISO on every node
			out = append(out, providers.Leftover{
				ID: volid, Kind: KindCloudInitISO, Installation: inst,
				Machine: providers.MachineRef{VMID: vmid, Node: node},
			})
		}
	}
	if len(errs) > 0 && len(errs) == len(nodes) {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// isoVolumes lists the volids of the iso content of the cloud-init storage
// on node.
func (p *Provider) isoVolumes(ctx context.Context, node string) ([]string, error) {
	var rows []struct {
		VolID string `json:"volid"`
	}
	path := fmt.Sprintf("/nodes/%s/storage/%s/content?%s", node, p.cfg.CloudInitStorage, url.Values{"content": {"iso"}}.Encode())
	if err := p.client.Get(ctx, path, &rows); err != nil {
		return nil, classify(fmt.Sprintf("listing ISOs of storage %s on %s", p.cfg.CloudInitStorage, node), err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.VolID)
	}
	return out, nil
}

// DeleteLeftover deletes a cloud-init ISO of this installation once its
// VMID is confirmed still free. One made before installations is refused:
// its name does not say whose it is.
func (p *Provider) DeleteLeftover(ctx context.Context, l providers.Leftover) error {
	_, file, _ := strings.Cut(l.ID, ":iso/")
	inst, vmid, ok := parseISO(file)
	if !ok || l.Kind != KindCloudInitISO || inst != p.cfg.Installation {
		return fmt.Errorf("%s is not a cloud-init ISO of installation %s: %w", l.ID, p.cfg.Installation, providers.ErrNotOwned)
	}
	free, err := p.vmidFree(ctx, vmid)
	if err != nil || !free {
		return err // held again: a machine is being made with this VMID
	}
	return p.deleteISO(ctx, l.Machine.Node, file)
}
