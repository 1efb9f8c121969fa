package runnerpool_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/bench/runnerlab"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/kubevirtsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/kubevirt"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

const (
	webhookSecret = "hook-s3cret"
	repo          = runnerlab.Repo
)

var (
	kv         *kubevirtsim.Simulator
	gh         *githubsim.Server
	webhookURL string
	rootCtx    = context.Background()
	// clk is the pools' clock: a test that waits for a pool's timeout
	// (idle TTL, poll interval) steps it rather than waiting it out.
	clk = clocktesting.NewFakeClock(time.Now())
)

// One manager (with the webhook receiver), one kubevirtsim, one githubsim
// sending real signed workflow_job deliveries to the receiver, and stand-in
// agents inside the runner VMs, for the whole package: the runner lab
// (internal/bench/runnerlab) with the suites' short intervals and clock.
func TestMain(m *testing.M) {
	testenv.MainWith(m, func() (func(), error) {
		// One PAT serves every test on both providers: a budget ten times
		// GitHub's hourly 5000 keeps one test's calls from starving the next.
		_, stop, err := runnerlab.Start(context.Background(), runnerlab.Options{
			Config: testenv.Config(), Client: testenv.Client(), WebhookSecret: webhookSecret,
			RateLimit: 50000, JobDuration: 500 * time.Millisecond, MessagePollWait: 2 * time.Second,
			Manager: runnerlab.Suite(clk),
			// The agents find each claim's machine on KubeVirt or, for a
			// Proxmox lab's namespace, on its simulator (proxmox_test.go).
			Agents: func(l *runnerlab.Lab, a *runnersim.Agents) {
				// Set before the agents start: their hooks read them.
				kv, gh, webhookURL = l.KubeVirt, l.GitHub, l.WebhookURL
				a.PowerOff, a.UserData, a.Process = guestPowerOff, guestUserData, guestProcess
			},
		})
		return stop, err
	})
}

// lab is one test's namespace with a KubeVirt cluster, a runner template
// and the GitHub credentials.
type lab struct {
	t  *testing.T
	ns string
	c  client.Client
}

func newLab(t *testing.T) *lab {
	t.Helper()
	l := &lab{t: t, ns: testenv.Namespace(t), c: testenv.Client()}
	// The simulator is the suite's: a test starts with every delivery of
	// the tests before it sent and none set to be dropped, so their tail
	// neither delays its deliveries nor swallows them (a drop a test asked
	// for and never used would take the next test's first delivery).
	gh.DropNextDeliveries(0)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		pending := 0
		for _, d := range gh.Deliveries() {
			if !d.Attempted {
				pending++
			}
		}
		return pending == 0, fmt.Sprintf("%d deliveries of earlier tests not sent yet", pending)
	})
	l.create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"token": gh.PAT()},
	})
	l.create(&hypervisorv1alpha1.HypervisorCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "kv"},
		Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt},
	})
	l.create(&hypervisorv1alpha1.HypervisorMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "runner"},
		Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
			ClusterRef: meta.LocalObjectReference{Name: "kv"},
			KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(runnerlab.RunnerVM)}},
		},
	})
	return l
}

func (l *lab) create(obj client.Object) {
	l.t.Helper()
	obj.SetNamespace(l.ns)
	if err := l.c.Create(rootCtx, obj); err != nil {
		l.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func (l *lab) pool(name string, mutate ...func(*hypervisorv1alpha1.RunnerPool)) *hypervisorv1alpha1.RunnerPool {
	l.t.Helper()
	owner, repoName, _ := strings.Cut(repo, "/")
	p := &hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{
			TemplateRef: meta.LocalObjectReference{Name: "runner"},
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: repoName,
				CredentialsRef: meta.LocalObjectReference{Name: "github-pat"}, APIURL: gh.URL() + "/"},
			Labels:      []string{name},
			MinReplicas: 0, MaxReplicas: 5,
			IdleTTL: &metav1.Duration{Duration: 2 * time.Second},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	l.create(p)
	poolLabels.Store(name, runnerstate.PoolRunnerLabel(p))
	// A pool outlives its test (the test's namespace is never emptied
	// here), and a later test's job with the same labels could go to it
	// rather than to the later test's pool of the same name: the webhook
	// matches pools in any namespace. Deleting it takes it out of matching.
	l.t.Cleanup(func() { _ = l.c.Delete(rootCtx, p) })
	return p
}

func (l *lab) get(name string) *hypervisorv1alpha1.RunnerPool {
	l.t.Helper()
	p := &hypervisorv1alpha1.RunnerPool{}
	if err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: name}, p); err != nil {
		l.t.Fatal(err)
	}
	return p
}

func (l *lab) claims() []hypervisorv1alpha1.MachineClaim {
	var list hypervisorv1alpha1.MachineClaimList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns), client.HasLabels{runnerpool.PoolLabel}); err != nil {
		l.t.Fatal(err)
	}
	return list.Items
}

func (l *lab) vms() int {
	var list kubevirtv1.VirtualMachineList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns), client.MatchingLabels{kubevirt.LabelOwnerKind: "MachineClaim"}); err != nil {
		l.t.Fatal(err)
	}
	return len(list.Items)
}

// poolLabels maps a pool name to the registration label of the pool of
// that name the running test made last (runnerpool.PoolRunnerLabel).
var poolLabels sync.Map

// registered counts the registrations GitHub lists of the running test's
// pool named pool: its runners' names start with it, and they carry its
// label. One githubsim serves every test, and the KubeVirt and Proxmox
// cases use the same pool names, so a name alone would also count an
// earlier test's pool still being deleted.
func registered(pool string) int {
	v, ok := poolLabels.Load(pool)
	if !ok {
		panic("registered: no pool " + pool + " made by this suite")
	}
	n := 0
	for _, r := range gh.Runners() {
		if strings.HasPrefix(r.Name, pool+"-") && slices.ContainsFunc(r.Labels, func(l string) bool { return strings.EqualFold(l, v.(string)) }) {
			n++
		}
	}
	return n
}

func describe(p *hypervisorv1alpha1.RunnerPool) string {
	s := p.Status
	var b strings.Builder
	fmt.Fprintf(&b, "desired %d replicas %d (pending %d idle %d busy %d) queued %d dereg %d; ", s.DesiredReplicas, s.Replicas,
		s.PendingReplicas, s.IdleReplicas, s.BusyReplicas, s.QueuedJobs, s.PendingDeregistrations)
	for _, c := range s.Conditions {
		fmt.Fprintf(&b, "%s=%s %s: %s; ", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func readyReason(p *hypervisorv1alpha1.RunnerPool) string {
	if c := apimeta.FindStatusCondition(p.Status.Conditions, meta.ReadyCondition); c != nil {
		return c.Reason
	}
	return ""
}

// events lists the reasons and notes of the events about pool name.
func (l *lab) events(name string) []string {
	l.t.Helper()
	var list eventsv1.EventList
	if err := l.c.List(rootCtx, &list, client.InNamespace(l.ns)); err != nil {
		l.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "RunnerPool" && ev.Regarding.Name == name {
			out = append(out, ev.Reason+": "+ev.Note)
		}
	}
	return out
}

// age moves the pools' clock to d after since (an API server timestamp),
// unless it is later already: the test ages a claim past a timeout instead
// of waiting it out. A claim made after since stays younger than d.
func age(since metav1.Time, d time.Duration) {
	if at := since.Add(d); at.After(clk.Now()) {
		clk.SetTime(at)
	}
}

// ageClaim moves the clock past d from when the pool made c: the pool
// measures a runner's age by its own (this fake) clock, recorded in the
// claim's hyperfleet.io/runner-created-at annotation.
func ageClaim(c *hypervisorv1alpha1.MachineClaim, d time.Duration) {
	at, err := time.Parse(time.RFC3339Nano, c.Annotations["hyperfleet.io/runner-created-at"])
	if err != nil {
		at = c.CreationTimestamp.Time
	}
	age(metav1.NewTime(at), d)
}

// ageDeletion moves the clock past d from when the pool's reconciler saw
// p deleted, by its own (this fake) clock: the deadline of a deleted pool
// runs from its hyperfleet.io/deletion-seen-at annotation.
func ageDeletion(t *testing.T, p *hypervisorv1alpha1.RunnerPool, d time.Duration) {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, p.Annotations["hyperfleet.io/deletion-seen-at"])
	if err != nil {
		t.Fatalf("the deleted pool %s has no deletion-seen-at annotation: %v", p.Name, err)
	}
	age(metav1.NewTime(at), d)
}
