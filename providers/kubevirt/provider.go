// Package kubevirt is the Hypervisor provider for KubeVirt: a machine is a
// kubevirt.io/v1 VirtualMachine made from a template, its state read from the
// VirtualMachineInstance KubeVirt runs for it.
//
// It speaks only to the Kubernetes API (the operator's own cluster or a
// remote one through a kubeconfig); what runs the VMs is KubeVirt's
// virt-controller and virt-handler, or kubevirtsim in tests.
package kubevirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Config configures a Provider.
type Config struct {
	// Client writes to the cluster and reads VirtualMachines and instances;
	// it may be a cached client (the manager's), since every write that
	// depends on a read is checked again on conflict.
	Client client.Client
	// Reader reads uncached, to settle what a stale cache got wrong (an
	// AlreadyExists on create). Defaults to Client.
	Reader client.Reader
	// Namespace puts every machine in one namespace; empty uses the
	// namespace in each MachineRef.
	Namespace string
	// Labels go on every VirtualMachine besides the ownership labels.
	Labels map[string]string
	// OwnerKind is the kind of object machines belong to (MachineClaim);
	// List returns only those.
	OwnerKind string
	// ManagedBy fills ${managed_by}. Default "hyperfleet".
	ManagedBy string
	// Installation is this installation's id, the LabelInstallation of
	// everything the provider makes and requires of everything it touches.
	Installation string
}

// Provider makes machines as KubeVirt VirtualMachines.
type Provider struct {
	cfg Config
}

var _ providers.Hypervisor = (*Provider)(nil)

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubevirt: a client is required")
	}
	if cfg.OwnerKind == "" {
		return nil, errors.New("kubevirt: an owner kind is required")
	}
	if err := providers.ValidateInstallation(cfg.Installation); err != nil {
		return nil, providers.Permanent("InvalidInstallation", err.Error()+": set the operator's --installation-id", nil)
	}
	if cfg.Reader == nil {
		cfg.Reader = cfg.Client
	}
	if cfg.ManagedBy == "" {
		cfg.ManagedBy = "hyperfleet"
	}
	return &Provider{cfg: cfg}, nil
}

func (p *Provider) namespace(ref providers.MachineRef) string {
	if p.cfg.Namespace != "" {
		return p.cfg.Namespace
	}
	return ref.Namespace
}

// Observe reads the VirtualMachine and its instance.
func (p *Provider) Observe(ctx context.Context, ref providers.MachineRef) (providers.Machine, error) {
	key := types.NamespacedName{Namespace: p.namespace(ref), Name: ref.Name}
	vm := &kubevirtv1.VirtualMachine{}
	if err := p.cfg.Client.Get(ctx, key, vm); err != nil {
		if apierrors.IsNotFound(err) {
			return providers.Machine{}, fmt.Errorf("VirtualMachine %s: %w", key, providers.ErrNotFound)
		}
		return providers.Machine{}, apiError("reading VirtualMachine "+key.String(), err)
	}
	return p.observe(ctx, vm)
}

func (p *Provider) observe(ctx context.Context, vm *kubevirtv1.VirtualMachine) (providers.Machine, error) {
	vmi, err := p.instance(ctx, p.cfg.Client, vm)
	if err != nil {
		return providers.Machine{}, err
	}
	m := machineOf(vm, vmi)
	if m.State != providers.PowerStopped && m.State != providers.PowerFailed {
		return m, nil
	}
	// A stop ends the machine for good, so it is confirmed with a live
	// read: a cache can show the VM's new status before the instance
	// KubeVirt just made for it.
	live := &kubevirtv1.VirtualMachine{}
	if err := p.cfg.Reader.Get(ctx, client.ObjectKeyFromObject(vm), live); err != nil {
		if apierrors.IsNotFound(err) {
			return m, nil
		}
		return providers.Machine{}, apiError("reading VirtualMachine "+vm.Namespace+"/"+vm.Name, err)
	}
	if vmi, err = p.instance(ctx, p.cfg.Reader, live); err != nil {
		return providers.Machine{}, err
	}
	return machineOf(live, vmi), nil
}

// instance reads vm's VirtualMachineInstance; nil when there is none.
func (p *Provider) instance(ctx context.Context, r client.Reader, vm *kubevirtv1.VirtualMachine) (*kubevirtv1.VirtualMachineInstance, error) {
	vmi := &kubevirtv1.VirtualMachineInstance{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(vm), vmi); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, apiError("reading VirtualMachineInstance "+vm.Namespace+"/"+vm.Name, err)
	}
	return vmi, nil
}

// Create makes the VirtualMachine and its cloud-init Secret, or reports the
// one already made. KubeVirt starts it; Observe follows the instance.
//
// A machine with user data is made in three steps (userdata.go): the VM
// halted, then the Secret owned by the VM, then the VM started. So the
// Secret never exists without an owner: a crash between two steps leaves at
// worst a halted VM, which the claim's deletion or the sweeper finds like
// any other, and Kubernetes' garbage collector takes the Secret with it.
func (p *Provider) Create(ctx context.Context, spec providers.MachineSpec) (providers.Machine, error) {
	ns := p.namespace(spec.Ref)
	key := types.NamespacedName{Namespace: ns, Name: spec.Ref.Name}
	vm := &kubevirtv1.VirtualMachine{}
	err := p.cfg.Client.Get(ctx, key, vm)
	switch {
	case err == nil:
		return p.existing(ctx, vm, spec)
	case !apierrors.IsNotFound(err):
		return providers.Machine{}, apiError("reading VirtualMachine "+key.String(), err)
	}

	want, err := p.build(spec, ns)
	if err != nil {
		return providers.Machine{}, err
	}
	if want.secret != nil {
		holdForUserData(want.vm)
	}
	if err := p.cfg.Client.Create(ctx, want.vm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// A stale cache said absent: settle it with a direct read.
			if err := p.cfg.Reader.Get(ctx, key, vm); err != nil {
				return providers.Machine{}, apiError("reading VirtualMachine "+key.String(), err)
			}
			return p.existing(ctx, vm, spec)
		}
		return providers.Machine{}, apiError("creating VirtualMachine "+key.String(), err)
	}
	if want.secret != nil {
		if err := p.provideUserData(ctx, want.vm, want.secret, spec.Owner); err != nil {
			return providers.Machine{}, err
		}
	}
	m := machineOf(want.vm, nil)
	m.Created, m.Notices = true, want.notices
	return m, nil
}

// existing answers Create for a VirtualMachine already there: ours, it is
// the machine (finishing the start a crash may have cut short); anyone
// else's, the name is taken.
func (p *Provider) existing(ctx context.Context, vm *kubevirtv1.VirtualMachine, spec providers.MachineSpec) (providers.Machine, error) {
	if !p.owns(vm, spec.Owner) {
		return providers.Machine{}, fmt.Errorf("VirtualMachine %s/%s exists and is not owned by %s/%s: %w", vm.Namespace, vm.Name, spec.Owner.Namespace, spec.Owner.Name, providers.ErrNameTaken)
	}
	// One made before installations becomes this installation's.
	if err := p.mark(ctx, vm); err != nil {
		return providers.Machine{}, err
	}
	if heldForUserData(vm) {
		want, err := p.build(spec, vm.Namespace)
		if err != nil {
			return providers.Machine{}, err
		}
		if want.secret == nil {
			// The user data is gone from the spec: start without it.
			err = p.startHeld(ctx, vm)
		} else {
			err = p.provideUserData(ctx, vm, want.secret, spec.Owner)
		}
		if err != nil {
			return providers.Machine{}, err
		}
		return machineOf(vm, nil), nil
	}
	// A VM made by a version that created the Secret first: own it now.
	if err := p.adoptSecret(ctx, vm); err != nil {
		return providers.Machine{}, err
	}
	return p.observe(ctx, vm)
}

// adoptSecret makes the VirtualMachine the cloud-init Secret's owner, so
// Kubernetes' garbage collector removes the Secret with the VM even when
// someone deletes the VM by hand.
func (p *Provider) adoptSecret(ctx context.Context, vm *kubevirtv1.VirtualMachine) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vm.Namespace, Name: secretName(vm.Name)}}
	ownerRef := vmOwnerRef(vm)
	// A merge patch on a Secret we may not have read: the ownerReferences
	// list is replaced whole, which is right since only we own it.
	patch := map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{ownerRef}}}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	err = p.cfg.Client.Patch(providers.WithoutBodies(ctx), s, client.RawPatch(types.MergePatchType, raw))
	if apierrors.IsNotFound(err) {
		return nil // a template that brings its own Secret, or no user data
	}
	return apiError("adopting Secret "+s.Namespace+"/"+s.Name, err)
}

// List returns every VirtualMachine of this provider's owner kind that
// this installation made, and those made before installations (no
// installation label): two selections, since a selector cannot say "this
// value or none".
func (p *Provider) List(ctx context.Context) ([]providers.Machine, error) {
	ours, err := p.listVMs(ctx, LabelInstallation+"="+p.cfg.Installation)
	if err != nil {
		return nil, err
	}
	unmarked, err := p.listVMs(ctx, "!"+LabelInstallation)
	if err != nil {
		return nil, err
	}
	out := make([]providers.Machine, 0, len(ours)+len(unmarked))
	for _, vms := range [][]kubevirtv1.VirtualMachine{ours, unmarked} {
		for i := range vms {
			out = append(out, machineOf(&vms[i], nil))
		}
	}
	return out, nil
}

// listVMs lists this owner kind's managed VirtualMachines matching the
// extra selector requirement. They may be the cache's own: read them, never
// change them.
func (p *Provider) listVMs(ctx context.Context, requirement string) ([]kubevirtv1.VirtualMachine, error) {
	sel, err := labels.Parse(fmt.Sprintf("%s=true,%s=%s,%s", LabelManaged, LabelOwnerKind, p.cfg.OwnerKind, requirement))
	if err != nil {
		return nil, fmt.Errorf("the owner kind %q cannot be selected: %w", p.cfg.OwnerKind, err)
	}
	// List only reads them (machineOf): the cache's own objects, not a deep
	// copy of every VM at each sweep. A client without a cache ignores it.
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy}
	if p.cfg.Namespace != "" {
		opts = append(opts, client.InNamespace(p.cfg.Namespace))
	}
	var vms kubevirtv1.VirtualMachineList
	if err := p.cfg.Client.List(ctx, &vms, opts...); err != nil {
		return nil, apiError("listing VirtualMachines", err)
	}
	return vms.Items, nil
}

// Check reports whether the cluster serves KubeVirt's API, KubeVirt's
// version when a KubeVirt install object is readable, and the nodes.
func (p *Provider) Check(ctx context.Context) (providers.ClusterInfo, error) {
	var info providers.ClusterInfo
	var vms kubevirtv1.VirtualMachineList
	if err := p.cfg.Reader.List(ctx, &vms, client.Limit(1)); err != nil {
		return info, apiError("listing VirtualMachines", err)
	}
	info.Version = "kubevirt.io/v1"
	installs := &unstructured.UnstructuredList{}
	installs.SetGroupVersionKind(kubevirtv1.SchemeGroupVersion.WithKind("KubeVirtList"))
	if err := p.cfg.Reader.List(ctx, installs); err == nil {
		for _, kv := range installs.Items {
			if v, _, _ := unstructured.NestedString(kv.Object, "status", "observedKubeVirtVersion"); v != "" {
				info.Version = "KubeVirt " + v
			}
		}
	}
	var nodes corev1.NodeList
	if err := p.cfg.Reader.List(ctx, &nodes); err == nil {
		for _, n := range nodes.Items {
			info.Nodes = append(info.Nodes, nodeInfo(&n))
		}
	}
	return info, nil
}

func nodeInfo(n *corev1.Node) providers.NodeInfo {
	ni := providers.NodeInfo{Name: n.Name}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ni.Online = c.Status == corev1.ConditionTrue
		}
	}
	if q, ok := n.Status.Capacity[corev1.ResourceCPU]; ok {
		ni.CPUs = int(q.Value())
	}
	if q, ok := n.Status.Capacity[corev1.ResourceMemory]; ok {
		ni.MemoryTotal = q.Value()
	}
	if q, ok := n.Status.Allocatable[corev1.ResourceMemory]; ok {
		ni.MemoryFree = q.Value()
	}
	return ni
}

// apiError classifies a Kubernetes API error for the reconcilers: a missing
// KubeVirt API or a denied request needs a person; the rest is retried.
func apiError(action string, err error) error {
	switch {
	case err == nil:
		return nil
	case apimeta.IsNoMatchError(err):
		return providers.Permanent("KubeVirtNotInstalled", fmt.Sprintf(
			"%s: the cluster does not serve kubevirt.io/v1 VirtualMachines; install KubeVirt (or point the HypervisorCluster at a cluster that has it)", action), err)
	case apierrors.IsForbidden(err):
		return providers.Permanent("Forbidden", fmt.Sprintf(
			"%s: %v; grant the operator's ServiceAccount access (see kustomize/rbac)", action, err), err)
	case apierrors.IsUnauthorized(err):
		return providers.Permanent("Unauthorized", fmt.Sprintf("%s: the cluster rejected the credentials: %v", action, err), err)
	case apierrors.IsInvalid(err):
		return providers.Permanent("Invalid", fmt.Sprintf("%s: %v", action, err), err)
	}
	var after time.Duration
	if secs, ok := apierrors.SuggestsClientDelay(err); ok {
		after = time.Duration(secs) * time.Second
	}
	return providers.Transient("KubeAPIError", after, fmt.Errorf("%s: %w", action, err))
}

var _ providers.TemplateChecker = (*Provider)(nil)

// CheckTemplate renders spec's template with stand-in values and decodes
// it, so a broken template is reported on the HypervisorMachineTemplate
// before any claim uses it.
func (p *Provider) CheckTemplate(_ context.Context, spec providers.MachineSpec) (string, error) {
	spec.Ref = providers.MachineRef{Name: "template-check", Namespace: "template-check"}
	spec.Owner = providers.Owner{UID: "template-check", Namespace: "template-check", Name: "template-check"}
	if _, err := p.build(spec, "template-check"); err != nil {
		return "", err
	}
	return "VirtualMachine template from " + spec.KubeVirt.TemplateSource, nil
}
