package runnerpool

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

// poolSpec is the part of a RunnerPool's spec scaling reads, within the
// CRD's rules (minReplicas <= replicas <= maxReplicas).
type poolSpec struct {
	Min, Span int32
	Replicas  int32
	ByHand    bool
}

func (p poolSpec) pool() *hypervisorv1alpha1.RunnerPool {
	pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns"}}
	pool.Spec.MinReplicas, pool.Spec.MaxReplicas = p.Min, p.Min+p.Span
	if p.ByHand {
		pool.Spec.Replicas = ptr.To(p.Min + p.Replicas%(p.Span+1))
	}
	return pool
}

func genPoolSpec() gopter.Gen {
	return gen.Struct(reflect.TypeOf(poolSpec{}), map[string]gopter.Gen{
		"Min": gen.Int32Range(0, 4), "Span": gen.Int32Range(0, 12), "Replicas": gen.Int32Range(0, 100), "ByHand": gen.Bool(),
	})
}

// jobEvent is one workflow_job delivery for one of a few jobs, in any order
// (GitHub redelivers, and deliveries race).
type jobEvent struct {
	Job    int
	Action github.JobAction
}

func genJobEvents() gopter.Gen {
	return gen.SliceOf(gen.Struct(reflect.TypeOf(jobEvent{}), map[string]gopter.Gen{
		"Job":    gen.IntRange(0, 15),
		"Action": gen.OneConstOf(github.JobWaiting, github.JobQueued, github.JobInProgress, github.JobCompleted),
	}))
}

// runnerOf is the runner that takes job: each job's own, as an ephemeral
// runner runs one job and is gone.
func runnerOf(job int) string { return "runner-" + strconv.Itoa(job) }

// deliver applies events as Demand.Record does: a record is created, or
// moved forward by rank, never back (advanceFrom).
func deliver(events []jobEvent) map[int]*hypervisorv1alpha1.RunnerJob {
	records := map[int]*hypervisorv1alpha1.RunnerJob{}
	for _, e := range events {
		next := stateOf(e.Action)
		rec, ok := records[e.Job]
		if ok && rec.Status.State.Rank() >= next.Rank() {
			continue
		}
		if !ok {
			rec = &hypervisorv1alpha1.RunnerJob{}
			records[e.Job] = rec
		}
		rec.Status.State = next
		if next == hypervisorv1alpha1.JobInProgress || next == hypervisorv1alpha1.JobCompleted {
			rec.Status.RunnerName = runnerOf(e.Job)
		}
	}
	return records
}

// observe is the fleet as a reconcile sees it. lagging jobs were taken by
// their runner (busy, or finished) while their in_progress and completed
// deliveries have not arrived: the record still says Queued.
func observe(records map[int]*hypervisorv1alpha1.RunnerJob, lagging map[int]bool) (*poolDemand, observed) {
	d := &poolDemand{}
	var obs observed
	claim := func(job int) *hypervisorv1alpha1.MachineClaim {
		return &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: runnerOf(job)}}
	}
	for job, rec := range records {
		shown := *rec
		switch rec.Status.State {
		case hypervisorv1alpha1.JobInProgress:
			obs.busy = append(obs.busy, claim(job))
		case hypervisorv1alpha1.JobCompleted:
			obs.finished = append(obs.finished, claim(job))
		}
		if lagging[job] && rec.Status.State.Rank() > hypervisorv1alpha1.JobQueued.Rank() {
			shown.Status.State, shown.Status.RunnerName = hypervisorv1alpha1.JobQueued, ""
		}
		d.records = append(d.records, shown)
	}
	d.count()
	return d, obs
}

func desiredFor(spec poolSpec, d *poolDemand, obs observed) int {
	return (&Reconciler{}).desired(&scope{pool: spec.pool(), demand: d}, obs)
}

// Properties 9 and 10 (RunnerPool scaling, lifecycle): whatever the recorded demand, and
// however far the records trail the runners, the pool scales within
// [minReplicas, maxReplicas], never below a hand-set floor, and never to
// fewer runners than are busy (up to max): scaling down only ever has idle
// runners to take.
func TestPropertyScalingStaysWithinBoundsAndKeepsBusyRunners(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("min <= desired <= max, desired >= busy", prop.ForAll(
			func(spec poolSpec, events []jobEvent, lagging map[int]bool) string {
				d, obs := observe(deliver(events), lagging)
				got := desiredFor(spec, d, obs)
				pool := spec.pool()
				lo, hi := int(pool.Spec.MinReplicas), int(pool.Spec.MaxReplicas)
				switch {
				case got < lo || got > hi:
					return fmt.Sprintf("desired %d outside [%d, %d]", got, lo, hi)
				case pool.Spec.Replicas != nil && got < int(*pool.Spec.Replicas):
					return fmt.Sprintf("desired %d below the hand-set floor %d", got, *pool.Spec.Replicas)
				case got < min(len(obs.busy), hi):
					return fmt.Sprintf("desired %d below the %d busy runners (max %d)", got, len(obs.busy), hi)
				}
				return ""
			},
			genPoolSpec(), genJobEvents(), gen.MapOf(gen.IntRange(0, 15), gen.Bool()),
		))
	})
}

// Property 13 (webhook-based autoscaling): once the events stop, the pool
// wants exactly its demand, one runner per busy or queued job, within its
// bounds: whatever order the deliveries came in (GitHub redelivers and
// reorders: here the same events, reversed), and even while some records
// still trail their runners (lagging), since such a runner stands for the
// queued record of its own job rather than asking for a second runner.
// The demand is counted from the jobs themselves, not from the records.
func TestPropertyScalingConvergesToDemand(t *testing.T) {
	proptest.Check(t, func(p *gopter.Properties) {
		p.Property("desired = clamp(busy + queued), in any delivery order", prop.ForAll(
			func(spec poolSpec, events []jobEvent, lagging map[int]bool) string {
				jobs := deliver(events)
				queued := 0
				for _, j := range jobs {
					if j.Status.State == hypervisorv1alpha1.JobQueued {
						queued++
					}
				}
				d, obs := observe(jobs, lagging)
				pool := spec.pool()
				floor := int(pool.Spec.MinReplicas)
				if pool.Spec.Replicas != nil {
					floor = int(*pool.Spec.Replicas)
				}
				want := max(min(max(floor, len(obs.busy)+queued), int(pool.Spec.MaxReplicas)), int(pool.Spec.MinReplicas))
				if got := desiredFor(spec, d, obs); got != want {
					return fmt.Sprintf("desired %d, want %d (busy %d, queued %d, floor %d)", got, want, len(obs.busy), queued, floor)
				}
				reversed := slices.Clone(events)
				slices.Reverse(reversed)
				rd, robs := observe(deliver(reversed), lagging)
				if got := desiredFor(spec, rd, robs); got != want {
					return fmt.Sprintf("desired %d with the deliveries reversed, %d in order", got, want)
				}
				return ""
			},
			genPoolSpec(), genJobEvents(), gen.MapOf(gen.IntRange(0, 15), gen.Bool()),
		))
	})
}
