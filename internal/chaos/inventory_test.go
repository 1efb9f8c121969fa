package chaos

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
)

// What the operator writes on a Proxmox VM to say whose it is
// (providers/proxmox/ownership.go); read here from the simulator's own
// state, independently of the operator's code.
var (
	pveOwnerTag  = regexp.MustCompile(`^hf-owner-([0-9a-f-]+)$`)
	pveOwnerLine = regexp.MustCompile(`(?m)^hyperfleet-owner-uid: ([0-9a-fA-F-]+)\s*$`)
	// userDataISO matches the provider's ISO names, old and new
	// (user-data-<vmid>.iso; hf-cloudinit-<installation>-<vmid>.iso): the
	// harness makes no other ISO there.
	userDataISO = regexp.MustCompile(`^` + isoStorage + `:iso/(user-data-\d+|hf-cloudinit-[a-z0-9-]+-\d+)\.iso$`)
)

// sightings is one snapshot of every machine on both hypervisors.
func (e *env) sightings(ctx context.Context) ([]sighting, error) {
	var out []sighting
	for _, vm := range e.pve.VMs() {
		if vm.VMID == templateVMID {
			continue
		}
		out = append(out, sighting{owner: pveOwner(vm.Tags, vm.Description), machine: fmt.Sprintf("pve/%d", vm.VMID)})
	}
	vms := &kubevirtv1.VirtualMachineList{}
	if err := e.c.List(ctx, vms, client.InNamespace(workNamespace)); err != nil {
		return nil, err
	}
	for _, vm := range vms.Items {
		out = append(out, sighting{owner: vm.Labels[kubevirt.LabelOwnerUID], machine: "kv/" + vm.Namespace + "/" + vm.Name})
	}
	return out, nil
}

func pveOwner(tags []string, description string) string {
	for _, t := range tags {
		if m := pveOwnerTag.FindStringSubmatch(t); m != nil {
			return m[1]
		}
	}
	if m := pveOwnerLine.FindStringSubmatch(description); m != nil {
		return strings.ToLower(m[1])
	}
	return ""
}

// leftovers is what remains on the hypervisors once every claim is gone.
type leftovers struct {
	pveVMs, isos, kvVMs, kvVMIs, kvSecrets []string
}

func (l leftovers) total() int {
	return len(l.pveVMs) + len(l.isos) + len(l.kvVMs) + len(l.kvVMIs) + len(l.kvSecrets)
}

func (l leftovers) String() string {
	return fmt.Sprintf("Proxmox VMs %v; user-data ISOs %v; KubeVirt VMs %v, VMIs %v, cloud-init Secrets %v",
		l.pveVMs, l.isos, l.kvVMs, l.kvVMIs, l.kvSecrets)
}

// leftovers counts, from the simulators: every Proxmox VM but the template
// (owned or not: a half-made clone is a leak too), every user-data ISO on
// the ISO storage of every node, every KubeVirt VM and VMI in the work
// namespace, and every Secret the KubeVirt provider made there.
func (e *env) leftovers(ctx context.Context) (leftovers, error) {
	var l leftovers
	for _, vm := range e.pve.VMs() {
		if vm.VMID != templateVMID {
			l.pveVMs = append(l.pveVMs, fmt.Sprintf("%d(%s,lock=%q,owner=%s)", vm.VMID, vm.Status, vm.Lock, pveOwner(vm.Tags, vm.Description)))
		}
	}
	isos, err := e.isos(ctx)
	if err != nil {
		return l, err
	}
	l.isos = isos
	vms := &kubevirtv1.VirtualMachineList{}
	if err := e.c.List(ctx, vms, client.InNamespace(workNamespace)); err != nil {
		return l, err
	}
	for _, vm := range vms.Items {
		l.kvVMs = append(l.kvVMs, vm.Name)
	}
	vmis := &kubevirtv1.VirtualMachineInstanceList{}
	if err := e.c.List(ctx, vmis, client.InNamespace(workNamespace)); err != nil {
		return l, err
	}
	for _, vmi := range vmis.Items {
		l.kvVMIs = append(l.kvVMIs, vmi.Name)
	}
	secrets := &corev1.SecretList{}
	if err := e.c.List(ctx, secrets, client.InNamespace(workNamespace), client.MatchingLabels{kubevirt.LabelManaged: "true"}); err != nil {
		return l, err
	}
	for _, s := range secrets.Items {
		l.kvSecrets = append(l.kvSecrets, s.Name)
	}
	return l, nil
}

// isos lists the user-data ISOs on every node's ISO storage, through the
// Proxmox API as an administrator would (faults are cleared by then).
func (e *env) isos(ctx context.Context) ([]string, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.pve.CACertPEM())
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	tokenID, secret := e.pve.APIToken()
	var out []string
	for _, node := range []string{"pve1", "pve2"} {
		url := fmt.Sprintf("%s/nodes/%s/storage/%s/content?content=iso", e.pve.URL(), node, isoStorage)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", fmt.Sprintf("PVEAPIToken=%s=%s", tokenID, secret))
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("listing ISOs on %s: %w", node, err)
		}
		var body struct {
			Data []struct {
				Volid string `json:"volid"`
			} `json:"data"`
		}
		if resp.StatusCode != http.StatusOK {
			_ = resp.Body.Close()
			return nil, fmt.Errorf("listing ISOs on %s: status %d", node, resp.StatusCode)
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("listing ISOs on %s: %w", node, err)
		}
		for _, v := range body.Data {
			if userDataISO.MatchString(v.Volid) {
				out = append(out, node+"/"+v.Volid)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
