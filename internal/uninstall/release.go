// Package uninstall holds what docs/uninstall.md needs beyond kubectl: the
// explicit release of HyperFleet's finalizers in one namespace, for when
// that namespace must go while the operator is not running
// (`hyperfleet release-finalizers`). Its tests follow docs/uninstall.md step
// by step on a whole test cluster.
package uninstall

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/cyberdesk"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisorcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/machineclaim"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
)

// Finalizers are those the operator adds and removes (docs/architecture.md,
// "Deletion order"); release removes these and no other.
var Finalizers = []string{
	machineclaim.Finalizer,            // MachineClaim
	runnerpool.Finalizer,              // RunnerPool
	cyberdesk.Finalizer,               // Cyberdesk
	hypervisorcluster.Finalizer,       // HypervisorCluster
	hypervisorcluster.SecretFinalizer, // a cluster's credentials and CA Secrets
}

// kinds are looked at in this order: what uses a cluster before the
// cluster, the cluster before its Secrets.
var kinds = []schema.GroupVersionKind{
	hypervisorv1alpha1.GroupVersion.WithKind("RunnerPool"),
	hypervisorv1alpha1.GroupVersion.WithKind("MachineClaim"),
	hypervisorv1alpha1.GroupVersion.WithKind("RunnerJob"),
	cyberdeskv1alpha1.GroupVersion.WithKind("Cyberdesk"),
	hourglassv1alpha1.GroupVersion.WithKind("Performer"),
	hourglassv1alpha1.GroupVersion.WithKind("HourglassExecutor"),
	hypervisorv1alpha1.GroupVersion.WithKind("HypervisorMachineTemplate"),
	hypervisorv1alpha1.GroupVersion.WithKind("HypervisorCluster"),
	{Version: "v1", Kind: "Secret"},
}

// Released is one object whose finalizers were removed.
type Released struct {
	Kind, Namespace, Name string
	Finalizers            []string
	// Machine is a MachineClaim's status.providerID (with its cluster): the
	// machine left on the hypervisor, for a later sweep.
	Machine string
}

// Release removes HyperFleet's finalizers from every object of namespace
// that carries one, and returns what it released. It reads metadata only
// (an object the operator could not decode is released too), except a
// MachineClaim's status, to name the machine it leaves behind. With dryRun
// it writes nothing.
func Release(ctx context.Context, c client.Client, namespace string, dryRun bool) ([]Released, error) {
	var out []Released
	for _, gvk := range kinds {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				continue // that CRD is not installed
			}
			return out, fmt.Errorf("listing %s in %s: %w", gvk.Kind, namespace, err)
		}
		for i := range list.Items {
			item := &list.Items[i]
			item.SetGroupVersionKind(gvk)
			r, err := release(ctx, c, item, dryRun)
			if err != nil {
				return out, err
			}
			if r != nil {
				out = append(out, *r)
			}
		}
	}
	return out, nil
}

func release(ctx context.Context, c client.Client, obj *metav1.PartialObjectMetadata, dryRun bool) (*Released, error) {
	// Read first: once released, a claim being deleted is gone.
	var machine string
	if obj.Kind == "MachineClaim" {
		machine = machineOf(ctx, c, obj)
	}
	var r *Released
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		r = nil
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		var keep, ours []string
		for _, f := range obj.Finalizers {
			if slices.Contains(Finalizers, f) {
				ours = append(ours, f)
			} else {
				keep = append(keep, f)
			}
		}
		if len(ours) == 0 {
			return nil
		}
		r = &Released{Kind: obj.Kind, Namespace: obj.Namespace, Name: obj.Name, Finalizers: ours}
		if dryRun {
			return nil
		}
		before := obj.DeepCopy()
		obj.Finalizers = keep
		return c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("releasing %s %s/%s: %w", obj.Kind, obj.Namespace, obj.Name, err)
	}
	if r != nil {
		r.Machine = machine
	}
	return r, nil
}

// machineOf names a claim's machine from its status, best effort.
func machineOf(ctx context.Context, c client.Client, obj *metav1.PartialObjectMetadata) string {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(obj.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), u); err != nil {
		return ""
	}
	id, _, _ := unstructured.NestedString(u.Object, "status", "providerID")
	cluster, _, _ := unstructured.NestedString(u.Object, "status", "clusterName")
	if id == "" {
		return ""
	}
	if cluster != "" {
		return id + " (cluster " + cluster + ")"
	}
	return id
}

// ErrOperatorRunning is returned when the operator's leader Lease is held:
// with the operator running, delete the objects and let it release them.
var ErrOperatorRunning = errors.New("the operator is running")

// CheckOperatorStopped refuses while the leader-election Lease
// namespace/name is held and not expired. A missing Lease, or one released
// (the operator releases it when it stops), passes.
func CheckOperatorStopped(ctx context.Context, c client.Reader, namespace, name string, now time.Time) error {
	l := &coordinationv1.Lease{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, l)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the operator's Lease %s/%s: %w", namespace, name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return nil
	}
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	if now.Before(expires) {
		return fmt.Errorf("%w: Lease %s/%s is held by %s until %s; delete the objects and let it release them, or stop it first (--force releases anyway, leaving the machines behind)",
			ErrOperatorRunning, namespace, name, *l.Spec.HolderIdentity, expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// Command is `hyperfleet release-finalizers`: flags parsed from args,
// the cluster reached through config(kubeconfig).
func Command(args []string, stdout, stderr io.Writer, config func(kubeconfig string) (*rest.Config, error)) error {
	fs := flag.NewFlagSet("hyperfleet release-finalizers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		kubeconfig, namespace, operatorNS, leaseName string
		force, dryRun                                bool
		timeout                                      time.Duration
	)
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Default: $KUBECONFIG, the in-cluster config, or ~/.kube/config.")
	fs.StringVar(&namespace, "namespace", "", "The namespace whose objects to release (required).")
	fs.StringVar(&operatorNS, "operator-namespace", "hyperfleet-system", "The operator's namespace, where its leader Lease lives.")
	fs.StringVar(&leaseName, "leader-election-id", "hyperfleet-leader", "The operator's leader-election Lease.")
	fs.BoolVar(&force, "force", false, "Release even while the operator's Lease is held.")
	fs.BoolVar(&dryRun, "dry-run", false, "Print what would be released; change nothing.")
	fs.DurationVar(&timeout, "timeout", 2*time.Minute, "Give up after this long.")
	fs.Usage = func() {
		_, _ = fmt.Fprint(fs.Output(), `Usage: hyperfleet release-finalizers --namespace NS [flags]

Removes HyperFleet's finalizers from every object of NS, so NS can be deleted
while the operator is not running (docs/uninstall.md). Nothing is deleted
outside the cluster: each released MachineClaim's machine stays on its
hypervisor, printed here, for the orphan sweeper of a later installation or
for you to delete.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if namespace == "" {
		return errors.New("--namespace is required")
	}
	cfg, err := config(kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if !force {
		if err := CheckOperatorStopped(ctx, c, operatorNS, leaseName, time.Now()); err != nil {
			return err
		}
	}
	released, err := Release(ctx, c, namespace, dryRun)
	verb := "released"
	if dryRun {
		verb = "would release"
	}
	machines := 0
	for _, r := range released {
		_, _ = fmt.Fprintf(stdout, "%s %s %s/%s: %v\n", verb, r.Kind, r.Namespace, r.Name, r.Finalizers)
		if r.Machine != "" {
			machines++
			_, _ = fmt.Fprintf(stdout, "  machine left on the hypervisor: %s\n", r.Machine)
		}
	}
	_, _ = fmt.Fprintf(stdout, "%s %d objects in %s; %d machines left on their hypervisors\n", verb, len(released), namespace, machines)
	return err
}
