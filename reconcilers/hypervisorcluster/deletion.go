package hypervisorcluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/orphans"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// Finalizer keeps a cluster, and its Secrets, until every machine made
// through it is deleted (or the deadline passes): without the cluster, a
// claim's finalizer cannot reach the hypervisor and its machine would be
// left for good.
const Finalizer = "hypervisor.hyperfleet.io/hypervisorcluster"

// machinesIndex indexes MachineClaims by the cluster that holds (or will
// hold) their machine: status.clusterName once resolved, and
// "template/<name>" for the template that names the cluster.
const machinesIndex = "hypervisorcluster.machines"

// waitPoll is how often a deleting cluster looks again at what is left:
// claims are watched, so this only bounds a missed event.
const waitPoll = 30 * time.Second

// namesShown bounds the claims a message names.
const namesShown = 5

func indexMachines(o client.Object) []string {
	c := o.(*hypervisorv1alpha1.MachineClaim)
	if !c.Spec.TemplateRef.IsMachineTemplate() {
		// Made by a Source on a hypervisor of the operator's, on no
		// HypervisorCluster, whatever its status.clusterName says.
		return nil
	}
	keys := []string{"template/" + c.Spec.TemplateRef.Name}
	if c.Status.ClusterName != "" {
		keys = append(keys, c.Status.ClusterName)
	}
	return keys
}

// deleting is what a deleting cluster found left.
type deleting struct {
	// claims are the MachineClaims whose machines are made through the
	// cluster, sorted; pooled counts those of RunnerPools.
	claims []string
	pooled int
	// orphans are the machines on the cluster whose claim is gone, which
	// the orphan sweeper deletes after its grace, sorted.
	orphans []string
	// timeout is the deletion timeout, for the message.
	timeout time.Duration
}

// empty reports whether nothing is left to wait for.
func (d *deleting) empty() bool { return len(d.claims) == 0 && len(d.orphans) == 0 }

func (d *deleting) describe() string {
	var parts []string
	if len(d.claims) > 0 || len(d.orphans) == 0 {
		parts = append(parts, fmt.Sprintf("%d MachineClaims (%d of RunnerPools): %s", len(d.claims), d.pooled, shown(d.claims)))
	}
	if len(d.orphans) > 0 {
		parts = append(parts, fmt.Sprintf("%d machines whose MachineClaim is gone, for the orphan sweeper: %s", len(d.orphans), shown(d.orphans)))
	}
	return strings.Join(parts, "; ")
}

// shown names at most namesShown of names.
func shown(names []string) string {
	more := ""
	if len(names) > namesShown {
		more = fmt.Sprintf(" and %d more", len(names)-namesShown)
		names = names[:namesShown]
	}
	return strings.Join(names, ", ") + more
}

// finalize waits for the machines made through the cluster to be deleted,
// then lets go of its Secrets and of the cluster. The deadline is checked
// before anything that can fail: past it the cluster is released whatever
// is left, with a Warning event naming it, and the machines are left to
// the orphan sweeper.
func (r *Reconciler) finalize(ctx context.Context, s *scope) (skeleton.Result, error) {
	c := s.cluster
	past := !s.now.Before(skeleton.DeletionDeadline(c, r.DeletionTimeout))
	left, err := r.machinesLeft(ctx, c)
	if err == nil && len(left.claims) == 0 {
		// The cache may not hold a claim made a moment ago, which may be
		// beginning its machine on this cluster right now: released on
		// that read, the cluster would strand the machine. So "none left"
		// is confirmed on the claims as stored, once per emptied wait.
		left, err = r.machinesLeftAsStored(ctx, c)
	}
	if err == nil && len(left.claims) == 0 {
		// Only once no claim is left: a claim's own machine is not an
		// orphan, and listing the hypervisor for each wait is not free.
		left.orphans, err = r.orphansLeft(ctx, c)
	}
	if !past {
		if err != nil {
			return skeleton.Continue(), err
		}
		if !left.empty() {
			s.deleting = left
			return skeleton.Requeue(waitPoll), nil
		}
	}
	secretsErr := r.releaseSecrets(ctx, c, append(heldSecrets(c), referencedSecrets(c)...))
	if secretsErr != nil && !past {
		return skeleton.Continue(), secretsErr
	}
	switch {
	case past:
		what := "what is left is unknown: " + fmt.Sprint(err)
		if err == nil {
			what = left.describe()
		}
		if secretsErr != nil {
			what += fmt.Sprintf("; its Secrets may keep the finalizer %s: %v", SecretFinalizer, secretsErr)
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, "FinalizerDeadlineExceeded", "Delete",
			"Released after %s with machines possibly left on it; the orphan sweeper cannot reach them without the cluster, delete them by hand: %s",
			r.DeletionTimeout, what)
	default:
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "MachinesDeleted", "Delete",
			"No MachineClaim has a machine on the cluster any more; releasing it and its Secrets")
	}
	if err := s.patch.ReleaseFinalizer(ctx, Finalizer); err != nil {
		return skeleton.Continue(), err
	}
	return skeleton.Continue(), nil
}

// machinesLeft finds, through the index, the MachineClaims whose machines
// are made through the cluster: those that recorded it, and those whose
// template names it that have not recorded another one.
func (r *Reconciler) machinesLeft(ctx context.Context, c *hypervisorv1alpha1.HypervisorCluster) (*deleting, error) {
	found := map[string]*hypervisorv1alpha1.MachineClaim{}
	var claims hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &claims, client.InNamespace(c.Namespace), client.MatchingFields{machinesIndex: c.Name}); err != nil {
		return nil, fmt.Errorf("listing the cluster's MachineClaims: %w", err)
	}
	for i := range claims.Items {
		found[claims.Items[i].Name] = &claims.Items[i]
	}
	var templates hypervisorv1alpha1.HypervisorMachineTemplateList
	if err := r.Client.List(ctx, &templates, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the templates that may name the cluster: %w", err)
	}
	for _, t := range templates.Items {
		if t.Spec.ClusterRef.Name != c.Name {
			continue
		}
		var byTemplate hypervisorv1alpha1.MachineClaimList
		if err := r.Client.List(ctx, &byTemplate, client.InNamespace(c.Namespace), client.MatchingFields{machinesIndex: "template/" + t.Name}); err != nil {
			return nil, fmt.Errorf("listing the MachineClaims of template %s: %w", t.Name, err)
		}
		for i := range byTemplate.Items {
			if mc := &byTemplate.Items[i]; mc.Status.ClusterName == "" || mc.Status.ClusterName == c.Name {
				found[mc.Name] = mc
			}
		}
	}
	return r.tally(found), nil
}

// storedPage bounds one page of the uncached claim listing.
const storedPage = 500

// machinesLeftAsStored is machinesLeft read from the API server rather
// than the cache: every claim of the namespace, a page at a time (the
// index exists only in the cache), kept if it recorded the cluster or, not
// yet resolved, its template names it.
func (r *Reconciler) machinesLeftAsStored(ctx context.Context, c *hypervisorv1alpha1.HypervisorCluster) (*deleting, error) {
	var templates hypervisorv1alpha1.HypervisorMachineTemplateList
	if err := r.Client.List(ctx, &templates, client.InNamespace(c.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the templates that may name the cluster: %w", err)
	}
	naming := map[string]bool{}
	for _, t := range templates.Items {
		naming[t.Name] = t.Spec.ClusterRef.Name == c.Name
	}
	found := map[string]*hypervisorv1alpha1.MachineClaim{}
	opts := []client.ListOption{client.InNamespace(c.Namespace), client.Limit(storedPage)}
	for {
		var page hypervisorv1alpha1.MachineClaimList
		if err := r.APIReader.List(ctx, &page, opts...); err != nil {
			return nil, fmt.Errorf("listing the namespace's MachineClaims as stored: %w", err)
		}
		for i := range page.Items {
			mc := &page.Items[i]
			if !mc.Spec.TemplateRef.IsMachineTemplate() {
				continue // on a hypervisor of the operator's (indexMachines)
			}
			if mc.Status.ClusterName == c.Name || mc.Status.ClusterName == "" && naming[mc.Spec.TemplateRef.Name] {
				found[mc.Name] = mc
			}
		}
		if page.Continue == "" {
			return r.tally(found), nil
		}
		opts = []client.ListOption{client.InNamespace(c.Namespace), client.Limit(storedPage), client.Continue(page.Continue)}
	}
}

// tally keeps, of the claims found, those that have or may still begin a
// machine on the cluster.
func (r *Reconciler) tally(found map[string]*hypervisorv1alpha1.MachineClaim) *deleting {
	d := &deleting{timeout: r.DeletionTimeout}
	for name, mc := range found {
		if !mayHoldMachine(mc) {
			continue
		}
		d.claims = append(d.claims, name)
		for _, ref := range mc.OwnerReferences {
			if ref.Kind == "RunnerPool" {
				d.pooled++
				break
			}
		}
	}
	sort.Strings(d.claims)
	return d
}

// orphansLeft lists the machines on the cluster that the orphan sweeper
// will delete: a claim released at its own finalization deadline (its
// machine could not be deleted then) leaves one, and once the cluster is
// gone nothing would ever reach it.
func (r *Reconciler) orphansLeft(ctx context.Context, c *hypervisorv1alpha1.HypervisorCluster) ([]string, error) {
	p, err := r.Hypervisors.For(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("reaching the hypervisor to look for orphaned machines: %w", err)
	}
	machines, err := p.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the machines on the hypervisor: %w", err)
	}
	// The cached list, read only: not copied (a metadata-only list would
	// start a second informer for every claim).
	var claims hypervisorv1alpha1.MachineClaimList
	if err := r.Client.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing MachineClaims: %w", err)
	}
	live := make(map[string]bool, len(claims.Items))
	for _, mc := range claims.Items {
		live[string(mc.UID)] = true
	}
	var out []string
	for _, m := range machines {
		if orphans.IsOrphan(m, live) {
			out = append(out, m.Ref.String())
		}
	}
	sort.Strings(out)
	return out, nil
}

// claimClusterDeleting is machineclaim.ReasonClusterDeleting: a claim that
// says it saw the cluster deleted before it began a machine never begins one.
const claimClusterDeleting = "ClusterDeleting"

// mayHoldMachine reports whether a claim has, or may still begin, a machine
// on the cluster. Not one that ended (its machine is gone), nor one with no
// machine begun that is deleted (its finalizer has nothing to delete) or that
// saw the cluster being deleted.
func mayHoldMachine(mc *hypervisorv1alpha1.MachineClaim) bool {
	switch mc.Status.Phase {
	case hypervisorv1alpha1.MachineTerminated, hypervisorv1alpha1.MachineFailed:
		return false
	}
	if mc.Status.MachineName != "" || mc.Status.VMID != nil {
		return true
	}
	if !mc.DeletionTimestamp.IsZero() {
		return false
	}
	ready := apimeta.FindStatusCondition(mc.Status.Conditions, meta.ReadyCondition)
	return ready == nil || ready.Reason != claimClusterDeleting
}

// clusterForClaim wakes a deleting cluster when one of its claims changes
// or goes; a live cluster is not woken (its health check has its own pace).
func (r *Reconciler) clusterForClaim(ctx context.Context, o client.Object) []reconcile.Request {
	mc, ok := o.(*hypervisorv1alpha1.MachineClaim)
	if !ok || !mc.Spec.TemplateRef.IsMachineTemplate() {
		return nil
	}
	name := mc.Status.ClusterName
	if name == "" {
		t := &hypervisorv1alpha1.HypervisorMachineTemplate{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: mc.Namespace, Name: mc.Spec.TemplateRef.Name}, t); err != nil {
			return nil
		}
		name = t.Spec.ClusterRef.Name
	}
	c := &hypervisorv1alpha1.HypervisorCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: mc.Namespace, Name: name}, c); err != nil || c.DeletionTimestamp.IsZero() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(c)}}
}
