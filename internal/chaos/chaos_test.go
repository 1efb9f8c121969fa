package chaos

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// drainBound is how long the final deletion of every claim may take.
const drainBound = 5 * time.Minute

// BenchmarkChaos is the failover run (`make chaos`): it prints the seed
// first and the report last, and fails when a claim ever had two machines
// or anything is left once every claim is gone and the orphan grace has
// passed. Run it once (-benchtime 1x); CHAOS_SEED repeats a run's choices,
// CHAOS_KILLS sets the number of kill points, CHAOS_FAULTS_PER_MINUTE the
// fault rate:
//
//	go test -run '^$' -bench Chaos -benchtime 1x -timeout 60m ./internal/chaos/
func BenchmarkChaos(b *testing.B) {
	cfg, err := configFromEnv(os.Getenv)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		runChaos(b, cfg)
	}
}

func runChaos(b *testing.B, cfg config) {
	b.StopTimer()
	fmt.Fprintf(os.Stderr, "chaos: seed %d (CHAOS_SEED=%d repeats its choices), %d kills, %d faults/min, %d CPUs\n",
		cfg.seed, cfg.seed, cfg.kills, cfg.faultsPerMinute, runtime.NumCPU())
	// The harness's own clients and kubevirtsim log nothing; the operator
	// processes log to files.
	ctrl.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := startEnv(b, ctx)
	bin, err := testenv.BuildOperator(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	ops := startOperators(b, e, bin, cfg)
	rep := &report{cfg: cfg, logs: ops.logDir}
	led := newLedger()
	work := newWorkload(e, cfg)
	inj := newInjector(e, cfg)
	started := time.Now()
	trackCtx, stopTracking := context.WithCancel(ctx)
	trackDone := make(chan struct{})
	go func() { defer close(trackDone); track(trackCtx, e, led) }()
	// The report is completed and printed whatever happens, a failure
	// included, and a twin fails the run.
	defer func() {
		stopTracking()
		<-trackDone
		rep.twins = led.twins()
		rep.owners, rep.polls = led.counts()
		rep.made, rep.deleted = work.counts()
		rep.perCluster = work.perCluster()
		rep.workloadErrors, rep.lastWorkloadErr = work.errorCount()
		rep.processes, rep.unexpectedExits = ops.Starts(), ops.UnexpectedExits()
		rep.total = time.Since(started)
		rep.print(b)
		if len(rep.twins) > 0 {
			b.Errorf("%d claims had two machines (seed %d)", len(rep.twins), cfg.seed)
		}
	}()

	b.StartTimer()
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{}, 2)
	go func() { work.run(loadCtx); loadDone <- struct{}{} }()
	go func() { inj.run(loadCtx); loadDone <- struct{}{} }()

	rep.kills = newKiller(e, ops, cfg).run(b, ctx)

	stopLoad()
	<-loadDone
	<-loadDone
	rep.faultsUnused = inj.stop()
	rep.faults, rep.faultKinds, rep.faultCounts = inj.summary()
	rep.chaosTime = time.Since(started)
	rep.standing = standing(ctx, e)

	// The drain: every claim deleted, then the grace waited out.
	if err := work.deleteAll(ctx); err != nil {
		b.Fatalf("deleting the remaining claims: %v", err)
	}
	eventually.That(b, drainBound, func() (bool, string) {
		list := &hypervisorv1alpha1.MachineClaimList{}
		if err := e.c.List(ctx, list, client.InNamespace(workNamespace)); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d claims still there after deletion: %s", len(list.Items), claimNames(list))
	})
	drained := time.Now()
	if err := work.settle(ctx); err != nil {
		b.Fatal(err)
	}
	// Past the grace, nothing may be left: the sweeper has had its grace
	// and two sweeps for what the finalizers missed. Polled until clean
	// or the bound; the last count is the one reported.
	settled := cfg.orphanGrace + 2*cfg.sweepInterval
	eventually.That(b, settled+time.Minute, func() (bool, string) {
		l, err := e.leftovers(ctx)
		if err != nil {
			return false, err.Error()
		}
		rep.left, rep.leftCounted = l, true
		waited := time.Since(drained)
		return waited >= settled && l.total() == 0, fmt.Sprintf("%s after the last claim was gone: %s", waited.Round(time.Second), l)
	})
	b.StopTimer()
}

func claimNames(list *hypervisorv1alpha1.MachineClaimList) string {
	out := ""
	for i, mc := range list.Items {
		if i == 10 {
			return out + " …"
		}
		out += fmt.Sprintf(" %s(%s, finalizers %v)", mc.Name, mc.Status.Phase, mc.Finalizers)
	}
	return out
}

// standing groups the claims alive at the end of the chaos phase by
// cluster, phase and Ready reason: where the workload stood when the kills
// stopped.
func standing(ctx context.Context, e *env) map[string]int {
	list := &hypervisorv1alpha1.MachineClaimList{}
	if err := e.c.List(ctx, list, client.InNamespace(workNamespace)); err != nil {
		return map[string]int{"listing failed: " + err.Error(): 1}
	}
	out := map[string]int{}
	for _, mc := range list.Items {
		reason, msg := "-", ""
		if c := apimeta.FindStatusCondition(mc.Status.Conditions, meta.ReadyCondition); c != nil {
			reason, msg = c.Reason, c.Message
		}
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		out[fmt.Sprintf("%s %s %s: %s", mc.Spec.TemplateRef.Name, mc.Status.Phase, reason, msg)]++
	}
	return out
}

// track snapshots both hypervisors into the ledger until ctx ends.
func track(ctx context.Context, e *env, led *ledger) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if seen, err := e.sightings(ctx); err == nil {
			led.observe(time.Now(), seen)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
