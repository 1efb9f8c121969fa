package performer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// adoptLegacy makes the Performer's Pods that lack meta.ManagedByLabel
// visible to the reconciler. The operator's cache holds only Pods with that
// label; a Pod the original Hourglass operator made carries none, so without
// this it would be invisible: never counted as serving (the Service would
// move off it before ours is Ready) and never removed (it would run beside
// ours for ever). HyperFleet has put the label on every Pod it made since
// the first version, so this only ever finds Pods of another operator that
// the Performer controls.
//
// It asks the API server (metadata only) once per Performer per process,
// labels what lacks the label, and stops the roll until the cache shows
// every such Pod; after one clean pass the Performer is not looked at again.
//
// A Performer whose status is empty is not asked about: no operator has
// reported on it, so it is new and no Pod of the original operator's runs
// for it (that operator reports on the Performers it makes Pods for), and
// a Pod HyperFleet made for it before a restart carries the label, so the
// cache shows it. A burst of new Performers thus costs no listing. That
// is a presumption, not a look, and is remembered as one: a Performer of
// the original operator's may have lost its status (restored from a backup
// without it, or made and left before that operator first reported). Its
// Service of the same name is found when ours is created (ensureService),
// which then leaves the Service as it is and sends this back to look
// (adoptMustList) before anything is routed.
func (r *Reconciler) adoptLegacy(ctx context.Context, s *scope) (skeleton.Result, error) {
	p := s.perf
	how, ok := r.adopted.Load(p)
	if ok && how != adoptMustList {
		return skeleton.Continue(), nil
	}
	if !ok && apiequality.Semantic.DeepEqual(p.Status, hourglassv1alpha1.PerformerStatus{}) {
		r.adopted.Store(p, adoptPresumed)
		return skeleton.Continue(), nil
	}
	var live metav1.PartialObjectMetadataList
	live.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := r.APIReader.List(ctx, &live, client.InNamespace(p.Namespace), client.MatchingLabels(selectorLabels(p))); err != nil {
		return skeleton.Stop(), fmt.Errorf("listing the Pods of Performer %s: %w", p.Name, err)
	}
	cached, err := listOwned(ctx, r.Client, p)
	if err != nil {
		return skeleton.Stop(), err
	}
	inCache := make(map[types.UID]bool, len(cached))
	for _, pod := range cached {
		inCache[pod.UID] = true
	}
	var waiting []string
	for i := range live.Items {
		m := &live.Items[i]
		if !metav1.IsControlledBy(m, p) || !m.DeletionTimestamp.IsZero() {
			continue
		}
		if inCache[m.UID] {
			continue
		}
		waiting = append(waiting, m.Name)
		if m.Labels[meta.ManagedByLabel] == meta.ManagedByValue {
			// Ours and labelled, made a moment ago: the cache catches up.
			continue
		}
		before := m.DeepCopy()
		labels := maps.Clone(m.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[meta.ManagedByLabel] = meta.ManagedByValue
		m.SetLabels(labels)
		ctrl.LoggerFrom(ctx).Info("Labelling a performer Pod made before the managed-by label, so the cache shows it", "pod", m.Name)
		if err := r.Client.Patch(ctx, m, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
			return skeleton.Stop(), fmt.Errorf("labelling Pod %s as the operator's: %w", m.Name, err)
		}
	}
	if len(waiting) > 0 {
		sort.Strings(waiting)
		s.adopting = strings.Join(waiting, ", ")
		return skeleton.StopAndRequeue(time.Second), nil
	}
	r.adopted.Store(p, adoptListed)
	return skeleton.Continue(), nil
}

// adoption is how adoptLegacy settled a Performer in this process.
type adoption int

const (
	// adoptPresumed: the Performer's status was empty, so no listing was
	// made (see adoptLegacy).
	adoptPresumed adoption = iota + 1
	// adoptListed: the API server was asked and every Pod it listed is in
	// the cache.
	adoptListed
	// adoptMustList: presumed, and then the original operator's Service
	// was found (ensureService): list, whatever the status says.
	adoptMustList
)

// errLookForOriginal: the original operator's Service was found for a
// Performer adoptLegacy only presumed had nothing of that operator's; the
// reconcile stops, and the next one lists its Pods before routing.
var errLookForOriginal = errors.New("the original operator's Service found: looking for its Pods first")
