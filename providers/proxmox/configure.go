package proxmox

import (
	"context"
	"fmt"
	"strings"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// configure applies size, network and cloud-init to a freshly cloned VM, and
// sets the ownership tags last: their presence means "configured", so a crash
// part-way makes the next call configure again, harmlessly. It returns the
// tags it wrote, so the caller goes on without reading the VM again.
func (p *Provider) configure(ctx context.Context, vm *proxmox.VirtualMachine, spec providers.MachineSpec) ([]string, error) {
	vmid := spec.Ref.VMID
	opts := settings(spec, p.cfg)
	if len(opts) > 0 {
		if err := vm.ConfigSync(ctx, opts...); err != nil {
			return nil, classify(fmt.Sprintf("configuring VM %d", vmid), err)
		}
	}
	if spec.CloudInit.UserData != "" {
		if err := p.attachUserData(ctx, vm, spec); err != nil {
			return nil, err
		}
	}
	tags := []string{managedTag, ownerTag(spec.Owner.UID), installationTag(p.cfg.Installation)}
	if vm.VirtualMachineConfig != nil {
		// What the clone inherited from its template stays, but never a
		// reserved tag: only the marks written here say who owns the VM.
		tags = append(tags, withoutReserved(splitTags(vm.VirtualMachineConfig.Tags))...)
	}
	tags = append(append(tags, p.cfg.Tags...), spec.Tags...)
	if err := vm.ConfigSync(ctx, proxmox.VirtualMachineOption{Name: "tags", Value: joinTags(tags)}); err != nil {
		return nil, classify(fmt.Sprintf("tagging VM %d", vmid), err)
	}
	return tags, nil
}

// settings are the config keys for size, NIC and, without custom user data,
// Proxmox's own cloud-init fields.
func settings(spec providers.MachineSpec, cfg Config) []proxmox.VirtualMachineOption {
	var opts []proxmox.VirtualMachineOption
	add := func(name string, value any) {
		opts = append(opts, proxmox.VirtualMachineOption{Name: name, Value: value})
	}
	if spec.Hostname != "" {
		add("name", spec.Hostname)
	}
	if spec.CPUCores > 0 {
		add("cores", spec.CPUCores)
	}
	if spec.CPUSockets > 0 {
		add("sockets", spec.CPUSockets)
	}
	if spec.MemoryMiB > 0 {
		add("memory", spec.MemoryMiB)
	}
	if net := net0(spec.Network, cfg); net != "" {
		add("net0", net)
	}
	if spec.CloudInit.UserData != "" {
		// Custom user data travels in our own NoCloud ISO; Proxmox's
		// cloud-init drive would be a second, conflicting datasource.
		return opts
	}
	if spec.CloudInit.User != "" {
		add("ciuser", spec.CloudInit.User)
	}
	if len(spec.CloudInit.SSHAuthorizedKeys) > 0 {
		add("sshkeys", proxmox.EncodeSSHKeys(spec.CloudInit.SSHAuthorizedKeys...))
	}
	add("ipconfig0", ipconfig(spec.Network))
	if ns := nameservers(spec.Network, cfg); ns != "" {
		add("nameserver", ns)
	}
	if sd := searchDomain(spec.Network, cfg); sd != "" {
		add("searchdomain", sd)
	}
	return opts
}

func net0(n providers.NetworkSpec, cfg Config) string {
	bridge := n.Bridge
	if bridge == "" {
		bridge = cfg.DefaultBridge
	}
	if bridge == "" {
		return ""
	}
	model := n.Model
	if model == "" {
		model = "virtio"
	}
	s := model + ",bridge=" + bridge
	if n.VLAN > 0 {
		s += fmt.Sprintf(",tag=%d", n.VLAN)
	}
	return s
}

func ipconfig(n providers.NetworkSpec) string {
	if n.IPv4CIDR == "" {
		return "ip=dhcp"
	}
	s := "ip=" + n.IPv4CIDR
	if n.Gateway != "" {
		s += ",gw=" + n.Gateway
	}
	return s
}

func nameservers(n providers.NetworkSpec, cfg Config) string {
	if len(n.Nameservers) > 0 {
		return strings.Join(n.Nameservers, " ")
	}
	return strings.Join(cfg.Nameservers, " ")
}

func searchDomain(n providers.NetworkSpec, cfg Config) string {
	if n.SearchDomain != "" {
		return n.SearchDomain
	}
	return cfg.SearchDomain
}

// attachUserData uploads a NoCloud ISO (user-data, meta-data, network-config)
// to the cloud-init storage and attaches it as ide2 (cloudinit.go), in place
// of Proxmox's cloud-init drive. Proxmox has no API to write the snippets that cicustom
// needs, while ISO upload is a supported API call.
func (p *Provider) attachUserData(ctx context.Context, vm *proxmox.VirtualMachine, spec providers.MachineSpec) error {
	vmid := spec.Ref.VMID
	if cfg := vm.VirtualMachineConfig; cfg != nil {
		// Keep ide2 out of the boot order go-proxmox extends, so it is not listed twice.
		boot := withoutDevice(cfg.Boot, "ide2")
		if strings.Contains(cfg.MergeDisks()["ide2"], "cloudinit") {
			opts := []proxmox.VirtualMachineOption{{Name: "delete", Value: "ide2"}}
			if boot != cfg.Boot {
				// In the same call: Proxmox refuses to drop a device its
				// boot order still lists ("invalid bootorder").
				opts = append(opts, proxmox.VirtualMachineOption{Name: "boot", Value: boot})
			}
			if err := vm.ConfigSync(ctx, opts...); err != nil {
				return classify(fmt.Sprintf("detaching Proxmox's cloud-init drive from VM %d", vmid), err)
			}
		}
		cfg.Boot = boot
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.Ref.Name
	}
	meta := fmt.Sprintf("instance-id: %s\nlocal-hostname: %s\n", spec.Owner.UID, hostname)
	if len(spec.CloudInit.SSHAuthorizedKeys) > 0 {
		meta += "public-keys:\n"
		for _, k := range spec.CloudInit.SSHAuthorizedKeys {
			meta += fmt.Sprintf("  - %q\n", k)
		}
	}
	return p.uploadUserData(ctx, vm, map[string]string{
		"user-data": spec.CloudInit.UserData, "meta-data": meta, "network-config": networkConfig(spec.Network, p.cfg),
	})
}

// networkConfig renders cloud-init network config v2 for the first NIC.
func networkConfig(n providers.NetworkSpec, cfg Config) string {
	var b strings.Builder
	b.WriteString("version: 2\nethernets:\n  primary:\n    match:\n      name: \"e*\"\n")
	if n.IPv4CIDR == "" {
		b.WriteString("    dhcp4: true\n")
	} else {
		fmt.Fprintf(&b, "    addresses: [%q]\n", n.IPv4CIDR)
		if n.Gateway != "" {
			fmt.Fprintf(&b, "    routes:\n      - to: default\n        via: %s\n", n.Gateway)
		}
	}
	if ns := nameservers(n, cfg); ns != "" {
		fmt.Fprintf(&b, "    nameservers:\n      addresses: [%s]\n", strings.Join(strings.Fields(ns), ", "))
		if sd := searchDomain(n, cfg); sd != "" {
			fmt.Fprintf(&b, "      search: [%s]\n", sd)
		}
	}
	return b.String()
}

// withoutDevice drops dev from a boot order like "order=scsi0;ide2;net0".
func withoutDevice(boot, dev string) string {
	if !strings.HasPrefix(boot, "order=") {
		return boot
	}
	var keep []string
	for _, d := range strings.Split(strings.TrimPrefix(boot, "order="), ";") {
		if d != dev && d != "" {
			keep = append(keep, d)
		}
	}
	return "order=" + strings.Join(keep, ";")
}
