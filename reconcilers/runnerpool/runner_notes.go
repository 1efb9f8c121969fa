package runnerpool

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// What the pool learned of a runner is written on the runner's claim, so a
// restart or a new leader decides as the process that learned it would
// have: an idle runner's TTL does not start again, a runner seen online is
// still known to have been, a finished runner's hold does not start again.
// Each is written when it changes, never on a steady reconcile. The times
// are the reconciler's clock, as createdAtAnnotation's.
const (
	// idleSinceAnnotation: when the runner was first seen online and idle
	// since it was last seen busy; removed once it is seen busy.
	idleSinceAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-idle-since"
	// seenOnlineAnnotation: when the runner was first seen online. An
	// ephemeral runner that was online and is no longer registered ran its
	// job (ranJob).
	seenOnlineAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-seen-online"
	// finishedAtAnnotation: when the finished runner was first held back
	// from retirement for a queued record (holdFinished).
	finishedAtAnnotation = hypervisorv1alpha1.NotesAnnotationPrefix + "runner-finished-at"
)

// noteKeys are the annotations the pool writes on its claims after their
// creation.
var noteKeys = []string{idleSinceAnnotation, seenOnlineAnnotation, finishedAtAnnotation}

// seenOnline reports whether c's runner was ever seen online.
func seenOnline(s *scope, c *hypervisorv1alpha1.MachineClaim) bool {
	_, ok := s.mem.note(c, seenOnlineAnnotation)
	return ok
}

// noteOnline notes that c's runner is seen online, the first time.
func noteOnline(s *scope, c *hypervisorv1alpha1.MachineClaim) {
	if !seenOnline(s, c) {
		s.mem.setNote(c, seenOnlineAnnotation, s.now)
	}
}

// idleSince is since when c's runner, seen online and idle, has been idle
// (observe notes it for every runner it sorts idle).
func idleSince(s *scope, c *hypervisorv1alpha1.MachineClaim) time.Time {
	t, _ := s.mem.noteTime(c, idleSinceAnnotation)
	return t
}

// noteParallelism is how many claims one reconcile writes notes on at once:
// a burst's runners come online together, and the pool's reconciles, scale-
// ups included, wait for the writes. The same 16 as createParallelism.
const noteParallelism = 16

// note is a value the pool decided for one annotation of a claim and wrote,
// or is about to write; removed: the annotation is to be gone.
type note struct {
	value   string
	removed bool
}

// notes are the notes decided by this process that the cache did not show
// yet, by claim and annotation. They are laid over the claims' annotations,
// so a reconcile that reads the cache before it shows the last write
// neither decides again (an idle runner's clock would start later) nor
// relies on a write that failed: a note stays until the cache shows it,
// and is written again until then.
type notes map[string]map[string]note

// shown reports whether claim c's annotations already say what n says.
func (n note) shown(c *hypervisorv1alpha1.MachineClaim, key string) bool {
	v, ok := c.Annotations[key]
	if n.removed {
		return !ok
	}
	return ok && v == n.value
}

// note reads one of c's notes: the one this process decided, until the
// cache shows it, else the claim's annotation.
func (m *poolMemory) note(c *hypervisorv1alpha1.MachineClaim, key string) (string, bool) {
	if n, ok := m.notes[c.Name][key]; ok && !n.shown(c, key) {
		return n.value, !n.removed
	}
	v, ok := c.Annotations[key]
	return v, ok
}

// noteTime reads one of c's notes as a time; one that does not parse (set
// by hand) reads as absent, so the pool notes it again.
func (m *poolMemory) noteTime(c *hypervisorv1alpha1.MachineClaim, key string) (time.Time, bool) {
	v, ok := m.note(c, key)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

// setNote decides one of c's notes; it is written by writeNotes.
func (m *poolMemory) setNote(c *hypervisorv1alpha1.MachineClaim, key string, at time.Time) {
	m.decide(c, key, note{value: at.UTC().Format(time.RFC3339Nano)})
}

// removeNote decides one of c's notes is gone, if it is there.
func (m *poolMemory) removeNote(c *hypervisorv1alpha1.MachineClaim, key string) {
	if _, ok := m.note(c, key); ok {
		m.decide(c, key, note{removed: true})
	}
}

func (m *poolMemory) decide(c *hypervisorv1alpha1.MachineClaim, key string, n note) {
	if m.notes == nil {
		m.notes = notes{}
	}
	if m.notes[c.Name] == nil {
		m.notes[c.Name] = map[string]note{}
	}
	m.notes[c.Name][key] = n
}

// writeNotes writes the notes the cache does not show yet onto the claims,
// noteParallelism at a time. It runs last: a reconcile's decisions come
// first (a burst's scale-up does not wait for them), and every reconcile
// reads its notes through the memory until the cache shows them. A write
// that fails is tried again by the next reconcile; a claim gone takes its
// notes with it.
func (r *Reconciler) writeNotes(ctx context.Context, s *scope) (skeleton.Result, error) {
	type write struct {
		claim *hypervisorv1alpha1.MachineClaim
		patch map[string]any
	}
	var writes []write
	for name, byKey := range s.mem.notes {
		c, ok := s.listed[name]
		if !ok || c.DeletionTimestamp != nil {
			// Gone from the listing, or going: retired, or deleted by
			// someone else. Nothing reads its notes any more.
			delete(s.mem.notes, name)
			continue
		}
		annotations := map[string]any{}
		for key, n := range byKey {
			switch {
			case n.shown(c, key):
				delete(byKey, key)
			case n.removed:
				annotations[key] = nil
			default:
				annotations[key] = n.value
			}
		}
		if len(byKey) == 0 {
			delete(s.mem.notes, name)
			continue
		}
		writes = append(writes, write{claim: c, patch: map[string]any{"metadata": map[string]any{"annotations": annotations}}})
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		gone []string
	)
	slots := make(chan struct{}, noteParallelism)
	for _, w := range writes {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			err := r.patchAnnotations(ctx, w.claim, w.patch)
			switch {
			case apierrors.IsNotFound(err):
				mu.Lock()
				gone = append(gone, w.claim.Name)
				mu.Unlock()
			case err != nil:
				ctrl.LoggerFrom(ctx).Error(err, "Writing a runner's notes on its MachineClaim failed; retried by the next reconcile", "claim", w.claim.Name)
			}
		}()
	}
	wg.Wait()
	for _, name := range gone {
		delete(s.mem.notes, name)
	}
	return skeleton.Continue(), nil
}

// patchAnnotations merge-patches annotations onto a claim (a nil value
// removes one). The claim as listed is not touched: it is the cache's.
func (r *Reconciler) patchAnnotations(ctx context.Context, c *hypervisorv1alpha1.MachineClaim, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	target := &hypervisorv1alpha1.MachineClaim{}
	target.Namespace, target.Name = c.Namespace, c.Name
	return r.Client.Patch(ctx, target, client.RawPatch(types.MergePatchType, body))
}

// notNotesOnly passes every claim event but an update that changed nothing
// but the claim's notes: the pool wrote them after deciding with them, so
// it has nothing to look at again, and a burst's notes would otherwise be
// as many more reconciles.
func notNotesOnly() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok := e.ObjectOld.(*hypervisorv1alpha1.MachineClaim)
		after, ok2 := e.ObjectNew.(*hypervisorv1alpha1.MachineClaim)
		if !ok || !ok2 {
			return true
		}
		return !equality.Semantic.DeepEqual(withoutNotes(before), withoutNotes(after))
	}}
}

// withoutNotes is a copy of c without its notes and what every write
// changes (resourceVersion, managedFields).
func withoutNotes(c *hypervisorv1alpha1.MachineClaim) *hypervisorv1alpha1.MachineClaim {
	c = c.DeepCopy()
	c.ResourceVersion, c.ManagedFields = "", nil
	for _, key := range noteKeys {
		delete(c.Annotations, key)
	}
	if len(c.Annotations) == 0 {
		c.Annotations = nil
	}
	return c
}
