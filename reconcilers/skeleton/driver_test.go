package skeleton_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

const testFinalizer = "test.hyperfleet.io/driver"

// driven is a test kind's scope: the claim, and the phases that ran.
type driven struct {
	claim *hypervisorv1alpha1.MachineClaim
	patch *skeleton.StatusPatch
	ran   []string
}

// harness is one test kind: phases that record their names, a fixed status,
// an event policy that records each change of the Ready reason, and one
// memory.
type harness struct {
	ran     []string
	events  []string
	gone    []types.NamespacedName
	memory  skeleton.Memory[string]
	written *skeleton.WrittenStatus[*hypervisorv1alpha1.MachineClaim]
}

func step(name string, res skeleton.Result, err error) skeleton.Phase[*driven] {
	return func(_ context.Context, s *driven) (skeleton.Result, error) {
		s.ran = append(s.ran, name)
		return res, err
	}
}

// release is a deletion phase that lets the object go.
func release(ctx context.Context, s *driven) (skeleton.Result, error) {
	s.ran = append(s.ran, "release")
	return skeleton.Stop(), s.patch.ReleaseFinalizer(ctx, testFinalizer)
}

var ready = conditions.Summary{State: conditions.Ready, Reason: meta.SucceededReason, Message: "done"}

func (h *harness) driver(c client.Client, phases, deletion []skeleton.Phase[*driven]) *skeleton.Driver[*hypervisorv1alpha1.MachineClaim, *driven] {
	d := &skeleton.Driver[*hypervisorv1alpha1.MachineClaim, *driven]{
		Client:   c,
		Recorder: events.NewFakeRecorder(10),
		Kind: skeleton.Kind[*hypervisorv1alpha1.MachineClaim, *driven]{
			New: func() *hypervisorv1alpha1.MachineClaim { return &hypervisorv1alpha1.MachineClaim{} },
			Scope: func(c *hypervisorv1alpha1.MachineClaim, p *skeleton.StatusPatch) *driven {
				return &driven{claim: c, patch: p}
			},
			Finalizer: testFinalizer,
			Phases:    phases,
			Deletion:  deletion,
			Status: func(s *driven, _ error) conditions.Summary {
				h.ran = s.ran
				return ready
			},
			Events: func(_ *driven, read, written *hypervisorv1alpha1.MachineClaim, summary conditions.Summary) {
				was, _ := conditions.ReadyMessage(read)
				now, _ := conditions.ReadyMessage(written)
				if was != now {
					h.events = append(h.events, was+"→"+now)
				}
			},
			Memory: []skeleton.Forgetter{&h.memory},
			Gone: func(_ context.Context, key types.NamespacedName) error {
				h.gone = append(h.gone, key)
				return nil
			},
		},
	}
	if h.written != nil {
		d.Kind.Written = h.written
		d.Kind.CopyStatus = func(dst, src *hypervisorv1alpha1.MachineClaim) { dst.Status = *src.Status.DeepCopy() }
	}
	return d
}

func TestDriver(t *testing.T) {
	stale := apierrors.NewConflict(schema.GroupResource{Group: "hypervisor.hyperfleet.io", Resource: "machineclaims"}, "claim", errors.New("stale read"))
	for _, tc := range []struct {
		name string
		// finalizers the claim is created with; deleted: it is then deleted.
		finalizers []string
		deleted    bool
		// missing: the request names no object.
		missing  bool
		phases   []skeleton.Phase[*driven]
		deletion []skeleton.Phase[*driven]

		wantRan      []string
		wantResult   ctrl.Result
		wantEvents   []string
		wantForget   bool
		wantGone     bool
		wantWritten  bool // the status says Ready
		wantHeld     bool // the claim holds testFinalizer afterwards
		wantObjGone  bool
		wantNoChange bool // the claim's resourceVersion did not move
	}{
		{name: "a new object gets the finalizer, runs its phases, then its events",
			phases:  []skeleton.Phase[*driven]{step("a", skeleton.Requeue(time.Minute), nil), step("b", skeleton.Continue(), nil)},
			wantRan: []string{"a", "b"}, wantResult: ctrl.Result{RequeueAfter: time.Minute},
			wantEvents: []string{"→" + meta.SucceededReason}, wantWritten: true, wantHeld: true},
		{name: "a conflict writes no status and emits no event",
			phases:  []skeleton.Phase[*driven]{step("a", skeleton.Stop(), stale), step("b", skeleton.Continue(), nil)},
			wantRan: []string{"a"}, wantResult: ctrl.Result{RequeueAfter: skeleton.ConflictRequeue}, wantHeld: true},
		{name: "an object being deleted runs the deletion phases, not the others, and is forgotten once released",
			finalizers: []string{testFinalizer}, deleted: true,
			phases:   []skeleton.Phase[*driven]{step("a", skeleton.Continue(), nil)},
			deletion: []skeleton.Phase[*driven]{step("drain", skeleton.Continue(), nil), release},
			wantRan:  []string{"drain", "release"}, wantForget: true, wantObjGone: true},
		{name: "an object being deleted that still waits keeps its finalizer and its memory",
			finalizers: []string{testFinalizer}, deleted: true,
			deletion: []skeleton.Phase[*driven]{step("drain", skeleton.StopAndRequeue(time.Second), nil), release},
			wantRan:  []string{"drain"}, wantResult: ctrl.Result{RequeueAfter: time.Second},
			wantEvents: []string{"→" + meta.SucceededReason}, wantWritten: true, wantHeld: true},
		{name: "an object being deleted without the finalizer runs nothing and writes nothing",
			finalizers: []string{"test.hyperfleet.io/someone-else"}, deleted: true,
			deletion:   []skeleton.Phase[*driven]{release},
			wantForget: true, wantNoChange: true},
		{name: "an object gone is forgotten",
			missing: true, phases: []skeleton.Phase[*driven]{step("a", skeleton.Continue(), nil)},
			wantForget: true, wantGone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := testenv.Client()
			claim := &hypervisorv1alpha1.MachineClaim{
				ObjectMeta: metav1.ObjectMeta{Namespace: testenv.Namespace(t), Name: "claim", Finalizers: tc.finalizers},
				Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "t"}},
			}
			h := &harness{}
			if !tc.missing {
				if err := c.Create(ctx, claim); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { dropFinalizers(t, claim) })
				if tc.deleted {
					if err := c.Delete(ctx, claim); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				claim.UID = "gone"
			}
			h.memory.Store(claim, "remembered")
			var before string
			if !tc.missing {
				before = reread(t, claim).ResourceVersion
			}

			res, err := h.driver(c, tc.phases, tc.deletion).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)})
			if err != nil || res != tc.wantResult {
				t.Fatalf("Reconcile = %+v, %v; want %+v, nil", res, err, tc.wantResult)
			}
			if !reflect.DeepEqual(h.ran, tc.wantRan) {
				t.Errorf("ran %v, want %v", h.ran, tc.wantRan)
			}
			if !reflect.DeepEqual(h.events, tc.wantEvents) {
				t.Errorf("event policy saw %v, want %v", h.events, tc.wantEvents)
			}
			if _, kept := h.memory.Load(claim); kept == tc.wantForget {
				t.Errorf("memory kept: %v; want forgotten: %v", kept, tc.wantForget)
			}
			if gone := len(h.gone) == 1; gone != tc.wantGone {
				t.Errorf("Gone called for %v; want called: %v", h.gone, tc.wantGone)
			}
			if tc.missing {
				return
			}
			got := &hypervisorv1alpha1.MachineClaim{}
			err = c.Get(ctx, client.ObjectKeyFromObject(claim), got)
			if tc.wantObjGone {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("Get = %v; want the released object gone", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if held := controllerutil.ContainsFinalizer(got, testFinalizer); held != tc.wantHeld {
				t.Errorf("finalizers %v; want %s held: %v", got.Finalizers, testFinalizer, tc.wantHeld)
			}
			if written := apimeta.IsStatusConditionTrue(got.Status.Conditions, meta.ReadyCondition); written != tc.wantWritten {
				t.Errorf("status %+v; want Ready written: %v", got.Status, tc.wantWritten)
			}
			if tc.wantNoChange && got.ResourceVersion != before {
				t.Errorf("resourceVersion %s → %s; want nothing written", before, got.ResourceVersion)
			}
		})
	}
}

// A reconcile that reads the object as it was before the driver's own
// status write (the cache is behind) diffs against the status it wrote,
// when the kind keeps a WrittenStatus: it writes nothing again, and its
// event policy sees no change to report again.
func TestDriverWrittenStatus(t *testing.T) {
	for _, tc := range []struct {
		name        string
		keep        bool
		wantWrites  int
		wantEvents2 []string
	}{
		{"kept: the stale read is diffed against what was written", true, 0, nil},
		{"not kept: the stale read writes and reports the same status again", false, 1, []string{"→" + meta.SucceededReason}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			claim := newClaim(t)
			t.Cleanup(func() { dropFinalizers(t, claim) })
			h := &harness{}
			if tc.keep {
				h.written = &skeleton.WrittenStatus[*hypervisorv1alpha1.MachineClaim]{}
			}
			req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(claim)}
			// The finalizer first, so the stale copy differs only in status.
			if err := skeleton.NewStatusPatch(testenv.Client(), claim).EnsureFinalizer(ctx, testFinalizer); err != nil {
				t.Fatal(err)
			}
			staleCopy := reread(t, claim)
			sc := &staleClient{Client: testenv.Client()}
			if _, err := h.driver(sc, nil, nil).Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if sc.writes != 1 {
				t.Fatalf("first reconcile wrote the status %d times; want once", sc.writes)
			}
			sc.writes, sc.stale, h.events = 0, staleCopy, nil
			if _, err := h.driver(sc, nil, nil).Reconcile(ctx, req); err != nil {
				t.Fatal(err)
			}
			if sc.writes != tc.wantWrites {
				t.Errorf("the reconcile of the stale read wrote the status %d times; want %d", sc.writes, tc.wantWrites)
			}
			if !reflect.DeepEqual(h.events, tc.wantEvents2) {
				t.Errorf("event policy saw %v; want %v", h.events, tc.wantEvents2)
			}
		})
	}
}

// staleClient returns stale, when set, for every Get, as a cache behind the
// latest write does, and counts status writes.
type staleClient struct {
	client.Client
	stale  *hypervisorv1alpha1.MachineClaim
	writes int
}

func (c *staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if c.stale == nil {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	c.stale.DeepCopyInto(obj.(*hypervisorv1alpha1.MachineClaim))
	return nil
}

func (c *staleClient) Status() client.SubResourceWriter {
	return &countingWriter{SubResourceWriter: c.Client.Status(), writes: &c.writes}
}

type countingWriter struct {
	client.SubResourceWriter
	writes *int
}

func (w *countingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	*w.writes++
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// dropFinalizers lets a test's claim go at the end of the test.
func dropFinalizers(t *testing.T, claim *hypervisorv1alpha1.MachineClaim) {
	t.Helper()
	ctx := context.Background()
	got := &hypervisorv1alpha1.MachineClaim{}
	if err := testenv.Client().Get(ctx, client.ObjectKeyFromObject(claim), got); err != nil {
		return
	}
	patch := client.MergeFrom(got.DeepCopy())
	got.Finalizers = nil
	if err := testenv.Client().Patch(ctx, got, patch); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}
