package tenancy_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// namespaceCases is how many generated cases (each a few hostile objects)
// the property needs in `make test`; PROPERTY_CASES searches harder.
const namespaceCases = 3

// objectsPerCase hostile objects are created side by side in one case.
const objectsPerCase = 3

// The other tenant's objects a hostile reference may name: they exist only
// in the other namespace.
const (
	otherSecret   = "team-b-secret"
	otherTemplate = "team-b-template"
	otherCluster  = "team-b-kv"
)

// hostileRefs are reference names a tenant may write (the schema admits
// any string of 1 to 253 characters): the other tenant's objects by name,
// with its namespace, as a path, cluster-scoped-looking names, the
// operator's namespace, long names and odd characters. {A} is the tenant's
// namespace and {B} the other tenant's.
var hostileRefs = []string{
	otherSecret, otherTemplate, otherCluster, "kv",
	"{B}", "{B}/" + otherSecret, "../{B}/" + otherSecret, "../../{B}/secrets/" + otherSecret,
	"../../../api/v1/namespaces/{B}/secrets/" + otherSecret, "{B}%2F" + otherSecret, "..", ".",
	"default", "kube-system", hypervisorlab.OperatorNamespace, hypervisorlab.OperatorNamespace + "/hyperfleet-webhook",
	"{A}", "{A}/../{B}", "kubernetes", "system:admin",
	strings.Repeat("a", 253), strings.Repeat("b.", 126) + "c", "team b secret", "team-b-secret\n", "ünïcödé", "x?namespace={B}",
}

// hostileNamespaces are spec.kubevirt.namespace values the schema admits
// (DNS labels) or empty.
var hostileNamespaces = []string{"", "{A}", "{B}", "default", "kube-system", hypervisorlab.OperatorNamespace}

// tenantObject is one hostile object of a tenant's: a KubeVirt cluster on
// the operator's own cluster naming a namespace, with a template and a
// claim on it; a claim; or a RunnerPool. A reference is an index into
// hostileRefs, or -1 for the tenant's own working object.
type tenantObject struct {
	Kind       int // 0 cluster+template+claim, 1 claim, 2 pool
	Namespace  int // index into hostileNamespaces
	ClusterRef int
	Template   int
	UserData   int
	Secret     int
	Min        int32
}

func genRef() gopter.Gen {
	return gen.Weighted([]gen.WeightedGen{
		{Weight: 1, Gen: gen.Const(-1)},
		{Weight: 2, Gen: gen.IntRange(0, len(hostileRefs)-1)},
	})
}

func genTenantObject() gopter.Gen {
	return gen.Struct(reflect.TypeOf(tenantObject{}), map[string]gopter.Gen{
		"Kind":       gen.IntRange(0, 2),
		"Namespace":  gen.IntRange(0, len(hostileNamespaces)-1),
		"ClusterRef": genRef(),
		"Template":   genRef(),
		"UserData":   genRef(),
		"Secret":     genRef(),
		"Min":        gen.Int32Range(0, 1),
	})
}

// Properties 26 and 17 (VM ownership and isolation; least privilege): what
// a tenant creates through its own rights, with references that try to
// reach another tenant's objects or out of its namespace, makes the
// operator create nothing outside the tenant's namespace — no object of
// any kind anywhere else that is the tenant's (by owner reference,
// ownership label or annotation, or naming its namespace), no VM on the
// other tenant's hypervisor — and leaves the other tenant's objects as they
// were.
func TestPropertyTenantObjectsStayInTheirNamespace(t *testing.T) {
	ctx := quiet()
	a := hypervisorlab.Proxmox(t)
	githubToken := githubSim.PAT()
	a.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gh-token", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"token": githubToken}})
	a.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "userdata", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"user-data": "#cloud-config\n"}})
	a.AsTenant()

	// The other tenant: its own Proxmox, a KubeVirt cluster on the
	// operator's cluster, a template on each, and Secrets, all Ready and
	// then left alone.
	b := hypervisorlab.Proxmox(t)
	b.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: otherSecret, Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"token": githubToken, "user-data": "#cloud-config\n", "kubeconfig": "x"}})
	b.Create(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: otherCluster},
		Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt, HealthCheckInterval: &metav1.Duration{Duration: time.Second}}})
	b.Create(&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: otherTemplate},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: otherCluster},
			KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: kubevirtVM()}}})
	for _, obj := range []client.Object{
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: otherCluster}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu"}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: otherTemplate}},
	} {
		eventually.That(t, 30*time.Second, func() (bool, string) {
			if err := b.Get(obj); err != nil {
				return false, err.Error()
			}
			ready := hypervisorlab.ReadyCondition(obj.(meta.ConditionsAccessor).GetConditions())
			return ready.Status == metav1.ConditionTrue, fmt.Sprintf("%T %s: Ready %s %s: %s", obj, obj.GetName(), ready.Status, ready.Reason, ready.Message)
		})
	}
	var cases atomic.Int32
	proptest.CheckCostly(t, namespaceCases, func(p *gopter.Properties) {
		p.Property("nothing is created outside the tenant's namespace, and the other tenant's objects are unchanged", prop.ForAll(
			func(objs []tenantObject) string {
				run := &namespaceCase{ctx: ctx, a: a, b: b, prefix: fmt.Sprintf("n%d", cases.Add(1))}
				return run.check(objs)
			},
			gen.SliceOfN(objectsPerCase, genTenantObject()),
		))
	})
}

func kubevirtVM() *runtime.RawExtension {
	return &runtime.RawExtension{Raw: []byte(hypervisorlab.KubeVirtVM)}
}

// namespaceCase is one generated case.
type namespaceCase struct {
	ctx     context.Context
	a, b    *hypervisorlab.Lab
	prefix  string
	created []client.Object
}

func (c *namespaceCase) ref(i int, own string) string {
	if i < 0 {
		return own
	}
	return strings.NewReplacer("{A}", c.a.NS, "{B}", c.b.NS).Replace(hostileRefs[i])
}

func (c *namespaceCase) create(obj client.Object) {
	obj.SetNamespace(c.a.NS)
	// The API server may refuse a hostile value (the schema's rules): then
	// there is nothing for the operator to react to.
	if err := c.a.C.Create(c.ctx, obj); err == nil {
		c.created = append(c.created, obj)
	}
}

func (c *namespaceCase) check(objs []tenantObject) string {
	before, err := snapshot(c.ctx, c.b)
	if err != nil {
		return err.Error()
	}
	for i, o := range objs {
		name := fmt.Sprintf("%s-%d", c.prefix, i)
		switch o.Kind {
		case 0:
			ns := strings.NewReplacer("{A}", c.a.NS, "{B}", c.b.NS).Replace(hostileNamespaces[o.Namespace])
			cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt,
					HealthCheckInterval: &metav1.Duration{Duration: time.Second}}}
			if ns != "" {
				cluster.Spec.KubeVirt = &hypervisorv1alpha1.KubeVirtClusterSpec{Namespace: ns}
			}
			c.create(cluster)
			// The namespace is what is hostile here: the template and the
			// claim are the tenant's own, so a machine is made if the
			// namespace is let through.
			c.create(&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: name},
					KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: kubevirtVM()}}})
			own := o
			own.UserData = -1
			c.claim(name, name, own)
			// A template of the tenant's naming a cluster it may not reach.
			c.create(&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name + "-ref"},
				Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: c.ref(o.ClusterRef, name)},
					KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: kubevirtVM()}}})
		case 1:
			c.claim(name, c.ref(o.Template, "ubuntu"), o)
		case 2:
			c.create(&hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: hypervisorv1alpha1.RunnerPoolSpec{
					TemplateRef: meta.LocalObjectReference{Name: c.ref(o.Template, "ubuntu")}, MinReplicas: o.Min, MaxReplicas: 1, Labels: []string{name},
					GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: "acme", Repository: "widgets",
						CredentialsRef: meta.LocalObjectReference{Name: c.ref(o.Secret, "gh-token")}, APIURL: githubSim.URL() + "/"},
				}})
		}
	}
	// The operator reacts: every object it was given says where it stands.
	for _, obj := range c.created {
		accessor := obj.(meta.ConditionsAccessor)
		if !eventually.Holds(30*time.Second, func() bool {
			return c.a.C.Get(c.ctx, client.ObjectKeyFromObject(obj), obj) == nil &&
				hypervisorlab.ReadyCondition(accessor.GetConditions()).Reason != ""
		}) {
			return fmt.Sprintf("%T %s never reported a Ready reason", obj, obj.GetName())
		}
	}
	time.Sleep(2 * time.Second) // what the reactions make, and their reactions
	if out := outside(c.ctx, c.a); len(out) > 0 {
		return "made outside the tenant's namespace: " + strings.Join(out, "; ")
	}
	after, err := snapshot(c.ctx, c.b)
	if err != nil {
		return err.Error()
	}
	if diff := before.diff(after); diff != "" {
		return "the other tenant's objects changed: " + diff
	}
	return ""
}

func (c *namespaceCase) claim(name, template string, o tenantObject) {
	claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: template}}}
	claim.Spec.UserDataSecretRef = &meta.SecretKeyReference{Name: c.ref(o.UserData, "userdata"), Key: "user-data"}
	c.create(claim)
}

// listed are the kinds the operator makes, or that are made for what it
// makes: every one is listed in every namespace.
var listed = []metav1.TypeMeta{
	{APIVersion: "v1", Kind: "SecretList"}, {APIVersion: "v1", Kind: "ConfigMapList"}, {APIVersion: "v1", Kind: "PodList"},
	{APIVersion: "v1", Kind: "ServiceList"}, {APIVersion: "v1", Kind: "ServiceAccountList"}, {APIVersion: "apps/v1", Kind: "DeploymentList"},
	{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineList"}, {APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstanceList"},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBindingList"}, {APIVersion: "coordination.k8s.io/v1", Kind: "LeaseList"},
	{APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "HypervisorClusterList"},
	{APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "HypervisorMachineTemplateList"},
	{APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "MachineClaimList"},
	{APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "RunnerPoolList"},
	{APIVersion: hypervisorv1alpha1.GroupVersion.String(), Kind: "RunnerJobList"},
}

func listAll(ctx context.Context, tm metav1.TypeMeta, opts ...client.ListOption) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{TypeMeta: tm}
	if err := testenv.Client().List(ctx, list, opts...); err != nil {
		return nil, fmt.Errorf("listing %s: %w", tm.Kind, err)
	}
	return list.Items, nil
}

// outside lists what is the tenant's but not in its namespace: an object
// of any listed kind in another namespace that has an owner reference to
// one of the tenant's objects, a label or annotation value holding one of
// their UIDs or the tenant's namespace, or a name made from it; an Event
// about one of the tenant's objects kept elsewhere; a VM on the
// simulator not owned by one of the tenant's claims.
func outside(ctx context.Context, a *hypervisorlab.Lab) []string {
	var out []string
	uids := map[types.UID]bool{}
	var all []metav1.PartialObjectMetadata
	kindOf := map[int]string{}
	for _, tm := range listed {
		items, err := listAll(ctx, tm)
		if err != nil {
			return []string{err.Error()}
		}
		for _, it := range items {
			if it.Namespace == a.NS {
				uids[it.UID] = true
			}
			kindOf[len(all)] = strings.TrimSuffix(tm.Kind, "List")
			all = append(all, it)
		}
	}
	mentions := func(s string) bool {
		if strings.Contains(s, a.NS) {
			return true
		}
		for uid := range uids {
			if strings.Contains(s, string(uid)) {
				return true
			}
		}
		return false
	}
	for i, it := range all {
		if it.Namespace == a.NS {
			continue
		}
		var why []string
		for _, ref := range it.OwnerReferences {
			if uids[ref.UID] {
				why = append(why, fmt.Sprintf("owned by %s %s", ref.Kind, ref.Name))
			}
		}
		for k, v := range it.Labels {
			if mentions(v) {
				why = append(why, fmt.Sprintf("label %s=%s", k, v))
			}
		}
		for k, v := range it.Annotations {
			if mentions(v) {
				why = append(why, fmt.Sprintf("annotation %s", k))
			}
		}
		if strings.Contains(it.Name, a.NS) {
			why = append(why, "named after the namespace")
		}
		if len(why) > 0 {
			out = append(out, fmt.Sprintf("%s %s/%s (%s)", kindOf[i], it.Namespace, it.Name, strings.Join(why, ", ")))
		}
	}
	var events corev1.EventList
	if err := testenv.Client().List(ctx, &events); err != nil {
		return []string{err.Error()}
	}
	for _, e := range events.Items {
		if e.Namespace != a.NS && (e.InvolvedObject.Namespace == a.NS || uids[e.InvolvedObject.UID]) {
			out = append(out, fmt.Sprintf("Event %s/%s about %s %s/%s", e.Namespace, e.Name, e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name))
		}
	}
	for _, vm := range a.OwnedVMs() {
		if !ownedByOneOf(vm, uids) {
			out = append(out, fmt.Sprintf("VM %d %s on the tenant's Proxmox, owned by none of its claims (tags %v)", vm.VMID, vm.Name, vm.Tags))
		}
	}
	return out
}

func ownedByOneOf(vm proxmoxsim.VM, uids map[types.UID]bool) bool {
	for _, tag := range vm.Tags {
		if uid, ok := strings.CutPrefix(tag, "hf-owner-"); ok && uids[types.UID(uid)] {
			return true
		}
	}
	return false
}

// tenantState is what the other tenant has: every object of a listed kind
// in its namespace (what may not change of it), and the VMs on its
// Proxmox.
type tenantState struct {
	objects map[string]string
	vms     []string
}

func snapshot(ctx context.Context, l *hypervisorlab.Lab) (tenantState, error) {
	s := tenantState{objects: map[string]string{}}
	for _, tm := range listed {
		items, err := listAll(ctx, tm, client.InNamespace(l.NS))
		if err != nil {
			return s, err
		}
		for _, it := range items {
			key := fmt.Sprintf("%s %s", strings.TrimSuffix(tm.Kind, "List"), it.Name)
			// Status is the operator's to write; what a tenant's object
			// is (its spec, its labels, its owners, its finalizers) is
			// not. Secrets and ConfigMaps have no status: any write
			// changes them.
			version := fmt.Sprintf("generation %d", it.Generation)
			if tm.Kind == "SecretList" || tm.Kind == "ConfigMapList" {
				version = "resourceVersion " + it.ResourceVersion
			}
			s.objects[key] = fmt.Sprintf("uid %s %s labels %v annotations %v owners %v finalizers %v",
				it.UID, version, it.Labels, it.Annotations, it.OwnerReferences, it.Finalizers)
		}
	}
	for _, vm := range l.Sim.VMs() {
		s.vms = append(s.vms, fmt.Sprintf("%d %s %v", vm.VMID, vm.Name, vm.Tags))
	}
	sort.Strings(s.vms)
	return s, nil
}

func (s tenantState) diff(after tenantState) string {
	var out []string
	for k, v := range s.objects {
		if w, ok := after.objects[k]; !ok {
			out = append(out, k+" is gone")
		} else if v != w {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, v, w))
		}
	}
	for k := range after.objects {
		if _, ok := s.objects[k]; !ok {
			out = append(out, k+" appeared")
		}
	}
	if !slices.Equal(s.vms, after.vms) {
		out = append(out, fmt.Sprintf("its Proxmox VMs %v → %v", s.vms, after.vms))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
