package demandfailover

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/replicas"
)

// scaleSetNamespace holds the scale-set pool, apart from the webhook test's.
const scaleSetNamespace = "ci-scaleset"

// Two real `hyperfleet run` processes with leader election serve a pool in
// scale-set mode; the leader, which holds the scale set's message session,
// is SIGKILLed in the middle of a burst, so its session is never closed.
// The new leader takes the session over once GitHub lets the dead one
// lapse, and every job is served by exactly one runner.
func TestScaleSetSessionSurvivesLeaderKilledMidBurst(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := testenv.Client()
	r := startRig(t, ctx)
	bin, kubeconfig, dir, kv := r.bin, r.kubeconfig, r.dir, r.kv
	// A killed listener's session lapses after 20 s here (GitHub does not
	// publish its figure); the new leader waits it out.
	gh := githubsim.New(githubsim.Options{Repositories: []string{repo}, JobDuration: 300 * time.Millisecond,
		MessagePollWait: 5 * time.Second, SessionIdleTimeout: 20 * time.Second})
	if err := gh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	setupScaleSet(t, ctx, c, gh)

	ops := replicas.Start(t, replicas.Spec{
		Prefix: "scaleset", LogDir: dir,
		Command: func(_, _ string) *exec.Cmd {
			return exec.Command(bin, "run", "--kubeconfig", kubeconfig,
				"--leader-elect=true", "--leader-election-namespace", operatorNamespace,
				"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms",
				"--operator-namespace", operatorNamespace, "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
				"--controllers", "hypervisorcluster,hypervisormachinetemplate,machineclaim,runnerpool",
				"--webhook-bind-address", "0", "--runnerpool-sync-interval", "1s")
		},
	}, "a", "b")
	agents := &runnersim.Agents{Client: c, GitHub: gh, Namespace: scaleSetNamespace, Log: logr.Discard(),
		PowerOff: func(ctx context.Context, claim *hypervisorv1alpha1.MachineClaim) error {
			return kv.GuestShutdown(claim.Namespace, claim.Status.MachineName)
		}}
	agents.Start(ctx)

	pool := func() *hypervisorv1alpha1.RunnerPool {
		p := &hypervisorv1alpha1.RunnerPool{}
		_ = c.Get(ctx, client.ObjectKey{Namespace: scaleSetNamespace, Name: "pool"}, p)
		return p
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		st := pool().Status.ScaleSet
		return st != nil && st.Session == hypervisorv1alpha1.ScaleSetSessionOpen, fmt.Sprintf("scale set %+v", st)
	})
	leader := holder(ctx)
	if leader == "" {
		t.Fatal("no leader")
	}
	owner := func() string {
		for _, ss := range gh.ScaleSets() {
			if ss.Name == "failover-scaleset" {
				return ss.Session
			}
		}
		return ""
	}
	if owner() != leader {
		t.Fatalf("the scale set's session is held by %q, the lease by %q", owner(), leader)
	}

	ids := make([]int64, 0, jobs)
	for range jobs {
		id, err := gh.QueueJob(repo, []string{"failover-scaleset"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	served := func() int {
		n := 0
		for _, id := range ids {
			if j, ok := gh.Job(id); ok && j.Status == githubsim.JobCompleted {
				n++
			}
		}
		return n
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		n := served()
		return n >= jobs/4, fmt.Sprintf("%d of %d jobs served before the kill", n, jobs)
	})
	servedAtKill := served()
	if _, err := ops.Kill(leader); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	var newLeader string
	eventually.That(t, time.Minute, func() (bool, string) {
		newLeader = holder(ctx)
		return newLeader != "" && newLeader != leader, "lease held by " + newLeader
	})
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		return owner() == newLeader, fmt.Sprintf("the session is held by %q, the new leader is %q", owner(), newLeader)
	})
	takeover := time.Since(killedAt)
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		n := served()
		return n == jobs, fmt.Sprintf("%d of %d jobs served; %+v", n, jobs, pool().Status)
	})
	byRunner := map[string]int{}
	for _, id := range ids {
		j, _ := gh.Job(id)
		if !strings.HasPrefix(j.RunnerName, "pool-") || j.Conclusion != "success" {
			t.Errorf("job %d ran on %q (%s)", id, j.RunnerName, j.Conclusion)
		}
		byRunner[j.RunnerName]++
	}
	for name, n := range byRunner {
		if n > 1 {
			t.Errorf("runner %s ran %d jobs", name, n)
		}
	}
	t.Logf("scale-set failover: 2 replicas, 1 SIGKILL with %d of %d jobs served; session taken over by the new leader %s after the kill (the dead session lapses after 20 s); every job served once",
		servedAtKill, jobs, takeover.Round(100*time.Millisecond))
	if exits := ops.UnexpectedExits(); len(exits) > 0 {
		t.Errorf("replicas exited on their own: %v", exits)
	}
}

// setupScaleSet makes the namespaces (the operator's may be there from the
// webhook test), the credentials, the KubeVirt cluster, the template and
// the scale-set pool.
func setupScaleSet(t *testing.T, ctx context.Context, c client.Client, gh *githubsim.Server) {
	t.Helper()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleSetNamespace}},
	}
	objs = append(objs, runnerObjects(scaleSetNamespace, gh, func(spec *hypervisorv1alpha1.RunnerPoolSpec) {
		spec.GitHub.ScaleSet = &hypervisorv1alpha1.ScaleSetSpec{Name: "failover-scaleset"}
	})...)
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && (!apierrors.IsAlreadyExists(err) || !isNamespace(o)) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

func isNamespace(o client.Object) bool {
	_, ok := o.(*corev1.Namespace)
	return ok
}
