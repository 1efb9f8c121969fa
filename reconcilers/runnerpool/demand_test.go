package runnerpool

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// demandPool makes a RunnerPool (its template does not exist, so the
// running reconciler leaves its jobs alone) for records to belong to.
func demandPool(t *testing.T) *hypervisorv1alpha1.RunnerPool {
	t.Helper()
	p := &hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Name: "demand", Namespace: testenv.Namespace(t)},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{
			TemplateRef: meta.LocalObjectReference{Name: "absent"},
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: "acme", Repository: "widgets",
				CredentialsRef: meta.LocalObjectReference{Name: "absent"}},
			MaxReplicas: 5,
		},
	}
	if err := testenv.Client().Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func getJob(t *testing.T, ns string, id int64) *hypervisorv1alpha1.RunnerJob {
	t.Helper()
	j := &hypervisorv1alpha1.RunnerJob{}
	if err := testenv.Client().Get(context.Background(), client.ObjectKey{Namespace: ns, Name: JobName(id)}, j); err != nil {
		t.Fatal(err)
	}
	return j
}

// A job is one record whatever reports it how often, and its state only
// moves forward: a redelivery or a late "queued" changes nothing, a
// "completed" that arrives first leaves a tombstone a later "queued"
// cannot revive, and the API server itself refuses a step back.
func TestRecordDeduplicatesAndOnlyMovesForward(t *testing.T) {
	ctx := context.Background()
	pool := demandPool(t)
	d := &Demand{Client: testenv.Client(), Reader: testenv.Client()}
	now := time.Unix(1_800_000_000, 0)
	ev := func(id int64, a github.JobAction, runner string) github.JobEvent {
		return github.JobEvent{ID: id, RunID: 9, Action: a, Owner: "acme", Repository: "widgets", Labels: []string{"self-hosted"}, RunnerName: runner}
	}
	steps := []struct {
		name    string
		event   github.JobEvent
		at      time.Duration
		changed bool
		waited  time.Duration
		state   hypervisorv1alpha1.RunnerJobState
	}{
		{"waiting", ev(7, github.JobWaiting, ""), 0, true, 0, hypervisorv1alpha1.JobWaiting},
		{"approved", ev(7, github.JobQueued, ""), 10 * time.Second, true, 0, hypervisorv1alpha1.JobQueued},
		{"queued redelivered", ev(7, github.JobQueued, ""), 20 * time.Second, false, 0, hypervisorv1alpha1.JobQueued},
		{"taken", ev(7, github.JobInProgress, "runner-a"), 52 * time.Second, true, 42 * time.Second, hypervisorv1alpha1.JobInProgress},
		{"late queued", ev(7, github.JobQueued, ""), 53 * time.Second, false, 0, hypervisorv1alpha1.JobInProgress},
		{"completed", ev(7, github.JobCompleted, "runner-a"), 60 * time.Second, true, 0, hypervisorv1alpha1.JobCompleted},
		{"completed first", ev(8, github.JobCompleted, "runner-b"), 0, true, 0, hypervisorv1alpha1.JobCompleted},
		{"its queued after", ev(8, github.JobQueued, ""), time.Second, false, 0, hypervisorv1alpha1.JobCompleted},
	}
	for _, s := range steps {
		changed, waited, err := d.Record(ctx, pool, s.event, SourceWebhook, now.Add(s.at))
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := getJob(t, pool.Namespace, s.event.ID)
		if changed != s.changed || waited != s.waited || got.Status.State != s.state {
			t.Errorf("%s: changed %v waited %s state %s; want %v %s %s", s.name, changed, waited, got.Status.State, s.changed, s.waited, s.state)
		}
	}
	j := getJob(t, pool.Namespace, 7)
	if j.Status.RunnerName != "runner-a" || j.Spec.PoolRef.Name != pool.Name || j.Labels[PoolLabel] != pool.Name ||
		j.Spec.Repository != "acme/widgets" || len(j.OwnerReferences) != 1 || j.OwnerReferences[0].UID != pool.UID {
		t.Errorf("record = %+v", j)
	}
	back := j.DeepCopy()
	back.Status.State = hypervisorv1alpha1.JobQueued
	err := testenv.Client().Patch(ctx, back, client.MergeFrom(j))
	if err == nil || !strings.Contains(err.Error(), "status.state only moves forward") {
		t.Fatalf("a step back = %v, want the API server to refuse it", err)
	}
}

// Replicas recording the same job at once, in any order, leave one record
// in the furthest state any of them reported.
func TestConcurrentRecordsConverge(t *testing.T) {
	ctx := context.Background()
	pool := demandPool(t)
	d := &Demand{Client: testenv.Client(), Reader: testenv.Client()}
	actions := []github.JobAction{github.JobQueued, github.JobInProgress, github.JobCompleted, github.JobQueued, github.JobWaiting}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := github.JobEvent{ID: 11, Action: actions[i%len(actions)], Owner: "acme", Repository: "widgets", RunnerName: "r"}
			if _, _, err := d.Record(ctx, pool, e, SourceWebhook, time.Now()); err != nil {
				errs <- fmt.Errorf("record %d (%s): %w", i, e.Action, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var list hypervisorv1alpha1.RunnerJobList
	if err := testenv.Client().List(ctx, &list, client.InNamespace(pool.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Status.State != hypervisorv1alpha1.JobCompleted {
		t.Fatalf("%d records, first %+v; want one, Completed", len(list.Items), list.Items)
	}
}

// want: every busy runner plus one per queued job no runner took yet; a
// busy or finished runner no record names is the runner of a job still
// recorded queued, not one more.
func TestDemandWant(t *testing.T) {
	claims := func(names []string) []*hypervisorv1alpha1.MachineClaim {
		var out []*hypervisorv1alpha1.MachineClaim
		for _, n := range names {
			out = append(out, &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: n}})
		}
		return out
	}
	cases := []struct {
		name     string
		queued   int
		named    []string
		busy     []string
		finished []string
		want     int
	}{
		{"nothing", 0, nil, nil, nil, 0},
		{"three queued", 3, nil, nil, nil, 3},
		{"a runner took one, its in_progress not yet recorded", 2, nil, []string{"a"}, nil, 2},
		{"and recorded", 2, []string{"a"}, []string{"a"}, nil, 3},
		{"busy runners with jobs never recorded", 0, nil, []string{"a", "b"}, nil, 2},
		{"a recorded runner that is gone", 1, []string{"gone"}, nil, nil, 1},
		{"a runner finished a job still recorded queued", 2, nil, nil, []string{"a"}, 1},
		{"a runner finished a job recorded completed", 2, []string{"a"}, nil, []string{"a"}, 2},
		{"more finished runners than queued jobs", 1, nil, []string{"b"}, []string{"a", "c"}, 1},
		{"a listing still shows busy a runner whose job is recorded completed", 1, []string{"a"}, []string{"a"}, nil, 2},
	}
	for _, tc := range cases {
		d := &poolDemand{queued: tc.queued, named: map[string]bool{}}
		for _, r := range tc.named {
			d.named[r] = true
		}
		if got := d.want(claims(tc.busy), claims(tc.finished)); got != tc.want {
			t.Errorf("%s: want() = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A job that starts or ends moves its record forward with one request
// (a patch of the cached copy, its resourceVersion the precondition), not
// a create refused AlreadyExists, a read past the cache and a patch; and a
// cache behind the record still moves it only forward.
func TestRecordAdvancesFromTheCacheInOneRequest(t *testing.T) {
	ctx := context.Background()
	pool := demandPool(t)
	c := &requestCounter{Client: testenv.Client()}
	fresh := &requestCounter{Client: testenv.Client()}
	d := &Demand{Client: c, Reader: fresh}
	now := time.Unix(1_800_000_000, 0)
	ev := func(a github.JobAction) github.JobEvent {
		return github.JobEvent{ID: 21, RunID: 9, Action: a, Owner: "acme", Repository: "widgets", RunnerName: "runner-a"}
	}
	if _, _, err := d.Record(ctx, pool, ev(github.JobQueued), SourceWebhook, now); err != nil {
		t.Fatal(err)
	}
	queued := getJob(t, pool.Namespace, 21)
	for i, a := range []github.JobAction{github.JobInProgress, github.JobCompleted} {
		c.writes, fresh.reads = 0, 0
		changed, _, err := d.Record(ctx, pool, ev(a), SourceWebhook, now.Add(time.Duration(i+1)*time.Second))
		if err != nil || !changed {
			t.Fatalf("%s: changed %v, %v", a, changed, err)
		}
		if c.writes != 1 || fresh.reads != 0 {
			t.Errorf("%s: %d writes and %d reads past the cache; want 1 and 0", a, c.writes, fresh.reads)
		}
	}
	// The cache still shows the record queued; stored, it is completed.
	c.stale = queued
	changed, _, err := d.Record(ctx, pool, ev(github.JobInProgress), SourceWebhook, now.Add(time.Minute))
	if err != nil || changed {
		t.Fatalf("in_progress after completed, from a stale cache: changed %v, %v; want no change", changed, err)
	}
	if got := getJob(t, pool.Namespace, 21).Status.State; got != hypervisorv1alpha1.JobCompleted {
		t.Fatalf("state %s after a stale in_progress; want Completed", got)
	}
}

// requestCounter counts the writes and the reads that go through it; Get
// answers stale, when set, as a cache behind the API server would.
type requestCounter struct {
	client.Client
	writes, reads int
	stale         *hypervisorv1alpha1.RunnerJob
}

func (c *requestCounter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.reads++
	if j, ok := obj.(*hypervisorv1alpha1.RunnerJob); ok && c.stale != nil {
		c.stale.DeepCopyInto(j)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *requestCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes++
	return c.Client.Create(ctx, obj, opts...)
}

func (c *requestCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.writes++
	return c.Client.Patch(ctx, obj, patch, opts...)
}
