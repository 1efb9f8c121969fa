package lifecycleprops_test

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// What the operator writes on a Proxmox VM and names its ISOs, read here
// from the simulator's own state, independently of the operator's code.
// (providers/proxmox/ownership.go: the description lines are written by the
// clone itself, the tags when the VM is configured afterwards).
var (
	pveOwnerTag  = regexp.MustCompile(`^hf-owner-([0-9a-f-]+)$`)
	pveOwnerLine = regexp.MustCompile(`(?m)^hyperfleet-owner-uid: ([0-9a-fA-F-]+)\s*$`)
	userDataISO  = regexp.MustCompile(`^(?:user-data-(\d+)|hf-cloudinit-[a-z0-9-]+-(\d+))\.iso$`)
)

// machine is one machine either hypervisor holds, whoever made it.
type machine struct {
	cluster string // clusterPVE or clusterKV
	name    string // "pve/<vmid>" or the VirtualMachine's name
	vmid    int
	owner   string // the owner UID it carries; empty for none
	running bool
	lock    string // a Proxmox VM's config lock ("clone" mid-clone)
}

func (m machine) String() string {
	return fmt.Sprintf("%s(owner %q, running %t, lock %q)", m.name, m.owner, m.running, m.lock)
}

// machines is every machine of the sequence: every Proxmox VM but the
// template (a half-made clone without marks is a leak too), every
// VirtualMachine in the namespace.
func (s *system) machines(ctx context.Context) ([]machine, error) {
	var out []machine
	for _, vm := range s.pve.VMs() {
		if vm.VMID == hypervisorlab.TemplateVMID {
			continue
		}
		m := machine{cluster: clusterPVE, name: fmt.Sprintf("pve/%d", vm.VMID), vmid: vm.VMID, running: vm.Status == "running"}
		for _, tag := range vm.Tags {
			if g := pveOwnerTag.FindStringSubmatch(tag); g != nil {
				m.owner = g[1]
			}
		}
		if g := pveOwnerLine.FindStringSubmatch(vm.Description); g != nil && m.owner == "" {
			m.owner = strings.ToLower(g[1])
		}
		m.lock = vm.Lock
		out = append(out, m)
	}
	vms := &kubevirtv1.VirtualMachineList{}
	if err := s.c.List(ctx, vms, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	for _, vm := range vms.Items {
		out = append(out, machine{cluster: clusterKV, name: vm.Name, owner: vm.Labels[kubevirt.LabelOwnerUID],
			running: vm.Status.PrintableStatus == kubevirtv1.VirtualMachineStatusRunning})
	}
	return out, nil
}

// twins lists every owner with more than one machine: a claim on two
// machines is a bug at any moment, settled or not.
func twins(ms []machine) []string {
	byOwner := map[string][]string{}
	for _, m := range ms {
		if m.owner != "" {
			byOwner[m.owner] = append(byOwner[m.owner], m.name)
		}
	}
	var out []string
	for owner, names := range byOwner {
		if len(names) > 1 {
			out = append(out, fmt.Sprintf("claim UID %s on %d machines: %v", owner, len(names), names))
		}
	}
	sort.Strings(out)
	return out
}

// twinCheck is the invariant every step checks.
func (s *system) twinCheck() []string {
	ms, err := s.machines(context.Background())
	if err != nil {
		return []string{"listing machines: " + err.Error()}
	}
	return twins(ms)
}

// settledViolations is everything that is wrong once the operator has
// settled after the sequence the model describes: what leaked, what a
// claim's status says that its machine does not.
func (s *system) settledViolations(m model) []string {
	ctx := context.Background()
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	ms, err := s.machines(ctx)
	if err != nil {
		return []string{"listing machines: " + err.Error()}
	}
	out = append(out, twins(ms)...)
	byOwner := map[string][]machine{}
	for _, mc := range ms {
		byOwner[mc.owner] = append(byOwner[mc.owner], mc)
	}

	claims := &hypervisorv1alpha1.MachineClaimList{}
	if err := s.c.List(ctx, claims, client.InNamespace(s.ns)); err != nil {
		return []string{"listing claims: " + err.Error()}
	}
	byName := map[string]*hypervisorv1alpha1.MachineClaim{}
	liveUIDs := map[string]bool{}
	for i := range claims.Items {
		mc := &claims.Items[i]
		byName[mc.Name] = mc
		if mc.DeletionTimestamp.IsZero() {
			liveUIDs[string(mc.UID)] = true
		}
	}
	for _, name := range m.deleted {
		if mc, ok := byName[name]; ok {
			bad("claim %s was deleted but is still there: %s", name, hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions))
		}
	}
	for _, c := range m.live {
		mc, ok := byName[c.name]
		if !ok {
			bad("claim %s vanished without being deleted", c.name)
			continue
		}
		out = append(out, claimMatchesMachine(mc, byOwner[string(mc.UID)], m.clusterDeleted(c.cluster()))...)
	}

	// Every machine belongs to a live claim: anything else is an orphan
	// the claim's finalizer or the sweeper should have deleted.
	for _, mc := range ms {
		if !liveUIDs[mc.owner] {
			bad("orphan machine %s on %s", mc, mc.cluster)
		}
	}
	// Every user-data ISO belongs to a VM that exists.
	vmids := map[int]bool{}
	for _, mc := range ms {
		if mc.cluster == clusterPVE {
			vmids[mc.vmid] = true
		}
	}
	for _, node := range []string{"pve1", "pve2"} {
		for _, iso := range s.pve.Volumes(node, "local", "iso") {
			g := userDataISO.FindStringSubmatch(iso)
			if g == nil {
				continue
			}
			vmid, _ := strconv.Atoi(g[1] + g[2])
			if !vmids[vmid] {
				bad("leaked user-data ISO %s/%s (no VM %d)", node, iso, vmid)
			}
		}
	}
	out = append(out, s.secretLeaks(ctx, byName, liveUIDs, byOwner)...)
	out = append(out, s.spireLeaks(ctx, claims.Items, byOwner)...)

	// A deleted cluster with no machine left on it is released.
	for _, cluster := range m.deletedClusters {
		left := 0
		for _, mc := range ms {
			if mc.cluster == cluster {
				left++
			}
		}
		hc := &hypervisorv1alpha1.HypervisorCluster{}
		err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: cluster}, hc)
		if left == 0 && !apierrors.IsNotFound(err) {
			bad("cluster %s was deleted and holds no machine, but is still there: %s", cluster, hypervisorlab.Describe("", hc.Status.Conditions))
		}
	}
	sort.Strings(out)
	return out
}

// claimMatchesMachine: a Ready claim has exactly its machine, running, and
// names it; a Terminated or Failed one has none; any other claim is still
// working, which a settled system allows only for a claim whose cluster was
// deleted before it began a machine (it waits, and begins none).
func claimMatchesMachine(mc *hypervisorv1alpha1.MachineClaim, own []machine, clusterDeleted bool) []string {
	state := hypervisorlab.Describe(mc.Status.Phase, mc.Status.Conditions)
	// Whatever it says, the operator must have said it about this spec: a
	// claim it never looked at has settled nothing.
	if ready := apimeta.FindStatusCondition(mc.Status.Conditions, meta.ReadyCondition); ready == nil || ready.ObservedGeneration != mc.Generation {
		return []string{fmt.Sprintf("claim %s has no Ready condition for generation %d yet: %s", mc.Name, mc.Generation, state)}
	}
	switch mc.Status.Phase {
	case hypervisorv1alpha1.MachineReady:
		if len(own) != 1 {
			return []string{fmt.Sprintf("claim %s is Ready with %d machines %v", mc.Name, len(own), own)}
		}
		vm := own[0]
		switch {
		case !vm.running:
			return []string{fmt.Sprintf("claim %s is Ready but its machine %s is not running", mc.Name, vm)}
		case vm.cluster == clusterPVE && (mc.Status.VMID == nil || int(*mc.Status.VMID) != vm.vmid):
			return []string{fmt.Sprintf("claim %s is Ready on %s but its status says VMID %v", mc.Name, vm, vmidOf(mc))}
		case vm.cluster == clusterKV && mc.Status.MachineName != vm.name:
			return []string{fmt.Sprintf("claim %s is Ready on %s but its status says machine %q", mc.Name, vm, mc.Status.MachineName)}
		}
		return nil
	case hypervisorv1alpha1.MachineTerminated, hypervisorv1alpha1.MachineFailed:
		if len(own) != 0 {
			return []string{fmt.Sprintf("claim %s ended (%s) but still has machines %v", mc.Name, state, own)}
		}
		return nil
	}
	if clusterDeleted && len(own) == 0 && mc.Status.VMID == nil && mc.Status.MachineName == "" {
		return nil
	}
	return []string{fmt.Sprintf("claim %s has not settled: %s; VMID %s, machine %q; machines %v", mc.Name, state, vmidOf(mc), mc.Status.MachineName, own)}
}

func vmidOf(mc *hypervisorv1alpha1.MachineClaim) string {
	if mc.Status.VMID == nil {
		return "none"
	}
	return strconv.Itoa(int(*mc.Status.VMID))
}

// secretLeaks: every cloud-init Secret the KubeVirt provider made belongs
// to a live claim that has its machine, so does every claim's join-token
// Secret, and no Secret a claim controls outlives the claim.
func (s *system) secretLeaks(ctx context.Context, byName map[string]*hypervisorv1alpha1.MachineClaim, liveUIDs map[string]bool, byOwner map[string][]machine) []string {
	secrets := &corev1.SecretList{}
	if err := s.c.List(ctx, secrets, client.InNamespace(s.ns)); err != nil {
		return []string{"listing Secrets: " + err.Error()}
	}
	var out []string
	for _, sec := range secrets.Items {
		if name, ok := strings.CutSuffix(sec.Name, "-attestation"); ok {
			if mc := byName[name]; mc == nil || len(byOwner[string(mc.UID)]) == 0 {
				out = append(out, fmt.Sprintf("leaked join-token Secret %s: its claim is gone or has no machine", sec.Name))
			}
			continue
		}
		if sec.Labels[kubevirt.LabelManaged] == "true" {
			owner := sec.Labels[kubevirt.LabelOwnerUID]
			if !liveUIDs[owner] || len(byOwner[owner]) == 0 {
				out = append(out, fmt.Sprintf("leaked cloud-init Secret %s (owner %q)", sec.Name, owner))
			}
			continue
		}
		for _, ref := range sec.OwnerReferences {
			if ref.Kind == "MachineClaim" && ref.Controller != nil && *ref.Controller && !liveUIDs[string(ref.UID)] {
				out = append(out, fmt.Sprintf("leaked Secret %s of gone claim %s", sec.Name, ref.Name))
			}
		}
	}
	return out
}

// spireLeaks: every SPIRE entry of the installation is a live claim's that
// has its machine; a claim that ended, or is gone, has none left.
func (s *system) spireLeaks(ctx context.Context, claims []hypervisorv1alpha1.MachineClaim, byOwner map[string][]machine) []string {
	entries, err := s.spire.Client(installation).ListEntries(ctx)
	if err != nil {
		return []string{"listing SPIRE entries: " + err.Error()}
	}
	live := map[string]bool{}
	for _, mc := range claims {
		if mc.DeletionTimestamp.IsZero() {
			live[string(mc.UID)] = true
		}
	}
	var out []string
	for _, e := range entries {
		m, _, err := spire.ParseID(e.SPIFFEID)
		if err != nil {
			continue // not a machine's entry (the credential endpoint's own)
		}
		if !live[m.UID] || len(byOwner[m.UID]) == 0 {
			out = append(out, fmt.Sprintf("leaked SPIRE entry %s of claim %s (UID %s) without a machine", e.ID, m.Name, m.UID))
		}
	}
	return out
}

// census is what the sequence left, in one line: claims by phase, machines
// by cluster, SPIRE entries.
func (s *system) census() string {
	ctx := context.Background()
	phases := map[string]int{}
	claims := &hypervisorv1alpha1.MachineClaimList{}
	if err := s.c.List(ctx, claims, client.InNamespace(s.ns)); err == nil {
		for _, mc := range claims.Items {
			phases[string(mc.Status.Phase)]++
		}
	}
	perCluster := map[string]int{}
	if ms, err := s.machines(ctx); err == nil {
		for _, m := range ms {
			perCluster[m.cluster]++
		}
	}
	entries, _ := s.spire.Client(installation).ListEntries(ctx)
	return fmt.Sprintf("claims by phase %v, machines by cluster %v, %d SPIRE entries, %d join tokens minted",
		phases, perCluster, len(entries), len(s.spire.MintedTokens()))
}
