package poolprops_test

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/commands"
	"github.com/leanovate/gopter/gen"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kubevirtv1 "kubevirt.io/api/core/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerpool"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
)

// The pools' timings, short so a sequence settles in seconds: the poll
// interval is the shortest the CRD allows, and the commands step the fake
// clock by it; the registration timeout is long, so stepping never times
// out a runner that is still booting.
const (
	pollInterval        = 10 * time.Second
	idleTTL             = 2 * time.Second
	registrationTimeout = time.Hour
)

// The bounds of a command's waits, in real time. A sequence that does not
// settle within them fails.
const (
	serveTimeout = 30 * time.Second
	drainTimeout = 90 * time.Second
)

// labelSet is the pool's labels: a, b, or both.
type labelSet int

const (
	poolA labelSet = iota
	poolB
	poolAB
)

func (l labelSet) String() string { return [...]string{"[a]", "[b]", "[a b]"}[l] }

// jobKind is the labels a job asks for besides self-hosted: a, b, both,
// or c, which no pool ever has.
type jobKind int

const (
	jobA jobKind = iota
	jobB
	jobAB
	jobC
)

func (k jobKind) String() string { return [...]string{"a", "b", "ab", "c"}[k] }

// job is the model of one job queued on GitHub: what it asks for, whether
// its queued delivery is lost (only the poll can find it), and whether the
// sequence ended it (completed or cancelled).
type job struct {
	Kind jobKind
	Lost bool
	Done bool
}

// model is what a sequence expects: the pool's spec and the jobs.
type model struct {
	Min, Max int32
	Labels   labelSet
	Jobs     []job
	// Steps counts the commands so far: the generator makes the last one
	// of a sequence Settle, which Settled marks.
	Steps   int
	Settled bool
}

func (m *model) String() string {
	return fmt.Sprintf("pool{min %d max %d labels %s}", m.Min, m.Max, m.Labels)
}

func (m *model) next() *model {
	n := *m
	n.Jobs = slices.Clone(m.Jobs)
	n.Steps++
	return &n
}

// fitting are the kinds of job the pool's labels fit.
func (m *model) fitting() []int {
	return [][]int{{int(jobA)}, {int(jobB)}, {int(jobA), int(jobB), int(jobAB)}}[m.Labels]
}

// outstanding are the indexes of the jobs the sequence has not ended.
func (m *model) outstanding() []int {
	var out []int
	for i, j := range m.Jobs {
		if !j.Done {
			out = append(out, i)
		}
	}
	return out
}

// Properties 9, 11, 12, 13 (RunnerPool scaling, runner lifecycle, cleanup,
// webhook-based autoscaling) as a state machine: whatever the sequence of
// job events, lost and redelivered deliveries, pool edits and operator
// restarts, the pool serves every job that fits its labels up to
// maxReplicas, never retires a busy runner, never holds more runners than
// its largest maxReplicas, and once the jobs are over comes back to
// minReplicas with nothing left behind: no registration, VM, MachineClaim
// or bootstrap Secret of a runner that is gone, and a status that says
// what exists.
func TestPropertyPoolStateMachine(t *testing.T) {
	proptest.CheckSequences(t, 3, 8, 12, 4, func(p *gopter.Properties) {
		p.Property("pools serve their jobs, within bounds, and settle clean", commands.Prop(poolCommands(t)))
	})
}

func poolCommands(t *testing.T) *commands.ProtoCommands {
	return &commands.ProtoCommands{
		NewSystemUnderTestFunc:     func(initial commands.State) commands.SystemUnderTest { return newSystem(t, initial.(*model)) },
		DestroySystemUnderTestFunc: func(s commands.SystemUnderTest) { s.(*system).destroy() },
		InitialStateGen: gopter.CombineGens(gen.Int32Range(0, 2), gen.Int32Range(1, 3), gen.IntRange(0, 2)).
			Map(func(v []any) *model {
				lo, hi := v[0].(int32), v[1].(int32)
				return &model{Min: lo, Max: max(lo, hi), Labels: labelSet(v[2].(int))}
			}),
		GenCommandFunc: genCommand,
	}
}

// genCommand draws the next command; the last of a sequence (its size) is
// always Settle.
func genCommand(st commands.State) gopter.Gen {
	m := st.(*model)
	return func(p *gopter.GenParameters) *gopter.GenResult {
		if m.Steps >= p.MaxSize-1 {
			return gopter.NewGenResult(commands.Command(settle{}), gopter.NoShrinker)
		}
		choices := []gen.WeightedGen{
			{Weight: 5, Gen: gopter.CombineGens(gen.Weighted([]gen.WeightedGen{
				// Mostly jobs the pool's labels fit, some that only
				// another label set would, a few that none does.
				{Weight: 4, Gen: gen.OneConstOf(toAny(m.fitting())...)}, {Weight: 2, Gen: gen.IntRange(0, 2)}, {Weight: 1, Gen: gen.Const(int(jobC))}}),
				gen.Weighted([]gen.WeightedGen{
					{Weight: 3, Gen: gen.Const(false)}, {Weight: 1, Gen: gen.Const(true)}})).
				Map(func(v []any) commands.Command { return queue{Kind: jobKind(v[0].(int)), Lost: v[1].(bool)} })},
			{Weight: 2, Gen: gopter.CombineGens(gen.Int32Range(0, 2), gen.Int32Range(1, 3)).
				Map(func(v []any) commands.Command {
					lo, hi := v[0].(int32), v[1].(int32)
					return bounds{Min: lo, Max: max(lo, hi)}
				})},
			{Weight: 1, Gen: gen.IntRange(0, 2).Map(func(v int) commands.Command { return relabel{Labels: labelSet(v)} })},
			{Weight: 1, Gen: gen.Const(commands.Command(restart{}))},
		}
		if out := m.outstanding(); len(out) > 0 {
			choices = append(choices,
				gen.WeightedGen{Weight: 3, Gen: gen.Const(commands.Command(serve{}))},
				gen.WeightedGen{Weight: 2, Gen: gen.OneConstOf(toAny(out)...).Map(func(i int) commands.Command { return complete{Job: i} })},
				gen.WeightedGen{Weight: 2, Gen: gen.OneConstOf(toAny(out)...).Map(func(i int) commands.Command { return cancel{Job: i} })},
			)
		}
		if len(m.Jobs) > 0 {
			choices = append(choices, gen.WeightedGen{Weight: 2, Gen: gen.IntRange(0, 15).Map(func(n int) commands.Command { return redeliver{N: n} })})
		}
		return gen.Weighted(choices)(p)
	}
}

func toAny(xs []int) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// result is what a command saw: a failure, or the state it left.
type result struct {
	failure string
	snap    *snapshot
}

// base holds what every command shares: it runs only before Settle, and
// its postcondition is the cheap safety check of the snapshot it took.
type base struct{}

func (base) PreCondition(st commands.State) bool { return !st.(*model).Settled }

func (base) PostCondition(st commands.State, res commands.Result) *gopter.PropResult {
	return verdict(res.(result).check(st.(*model)))
}

func verdict(failure string) *gopter.PropResult {
	if failure != "" {
		return &gopter.PropResult{Status: gopter.PropFalse, Labels: []string{failure}}
	}
	return &gopter.PropResult{Status: gopter.PropTrue}
}

// check is the cheap safety check every command makes: the failure the
// command itself met, a runner killed mid-job, or more runners than the
// largest maxReplicas the pool had.
func (r result) check(_ *model) string {
	if r.failure != "" {
		return r.failure
	}
	return r.snap.safety()
}

// queue queues a job; Lost loses its queued delivery, so only the poll
// finds it.
type queue struct {
	base
	Kind jobKind
	Lost bool
}

func (q queue) String() string {
	if q.Lost {
		return "Queue(" + q.Kind.String() + ", delivery lost)"
	}
	return "Queue(" + q.Kind.String() + ")"
}

func (q queue) NextState(st commands.State) commands.State {
	m := st.(*model).next()
	m.Jobs = append(m.Jobs, job{Kind: q.Kind, Lost: q.Lost})
	return m
}

func (q queue) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(q)
	spec := githubsim.JobSpec{Repo: repo, Labels: s.jobLabels(q.Kind)}
	if q.Lost {
		spec.LoseDeliveries = []string{githubsim.JobQueued}
	}
	id, err := gh.QueueJobSpec(spec)
	if err != nil {
		return s.fail("queueing a job: %v", err)
	}
	s.jobs = append(s.jobs, id)
	return s.look()
}

// serve is the jobs' in_progress: it waits, stepping the clock for the
// poll, until the pool's runners have taken every queued job that fits
// the pool's labels, or as many as maxReplicas allows.
type serve struct{ base }

func (serve) String() string                             { return "Serve" }
func (serve) NextState(st commands.State) commands.State { return st.(*model).next() }
func (c serve) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(c)
	return s.serve()
}

// complete ends a job: its runner finishes it, or, if no runner took it
// yet, it is cancelled before it starts.
type complete struct {
	base
	Job int
}

func (c complete) String() string { return fmt.Sprintf("Complete(job %d)", c.Job) }

func (c complete) PreCondition(st commands.State) bool {
	m := st.(*model)
	return !m.Settled && c.Job < len(m.Jobs) && !m.Jobs[c.Job].Done
}

func (c complete) NextState(st commands.State) commands.State {
	m := st.(*model).next()
	m.Jobs[c.Job].Done = true
	return m
}

func (c complete) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(c)
	id := s.jobs[c.Job]
	j, _ := gh.Job(id)
	var err error
	switch j.Status {
	case githubsim.JobInProgress:
		err = gh.CompleteJob(id, "success")
	case githubsim.JobQueued:
		err = gh.CancelJob(id)
	}
	if err != nil {
		return s.fail("ending job %d: %v", id, err)
	}
	return s.look()
}

// cancel cancels a job, queued or running.
type cancel struct {
	base
	Job int
}

func (c cancel) String() string                             { return fmt.Sprintf("Cancel(job %d)", c.Job) }
func (c cancel) PreCondition(st commands.State) bool        { return complete(c).PreCondition(st) }
func (c cancel) NextState(st commands.State) commands.State { return complete(c).NextState(st) }

func (c cancel) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(c)
	id := s.jobs[c.Job]
	if j, _ := gh.Job(id); j.Status != githubsim.JobCompleted {
		if err := gh.CancelJob(id); err != nil {
			return s.fail("cancelling job %d: %v", id, err)
		}
	}
	return s.look()
}

// redeliver sends one of the sequence's deliveries again (GitHub's
// "Redeliver"), the N-th of those sent so far, round.
type redeliver struct {
	base
	N int
}

func (r redeliver) String() string                           { return fmt.Sprintf("Redeliver(%d)", r.N) }
func (redeliver) NextState(st commands.State) commands.State { return st.(*model).next() }

func (r redeliver) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(r)
	var sent []githubsim.Delivery
	for _, d := range gh.Deliveries() {
		if d.Attempted && slices.Contains(s.jobs, d.JobID) {
			sent = append(sent, d)
		}
	}
	if len(sent) > 0 {
		if _, err := gh.Redeliver(sent[r.N%len(sent)].ID); err != nil {
			return s.fail("redelivering: %v", err)
		}
	}
	return s.look()
}

// bounds sets the pool's minReplicas and maxReplicas.
type bounds struct {
	base
	Min, Max int32
}

func (b bounds) String() string { return fmt.Sprintf("Bounds(min %d, max %d)", b.Min, b.Max) }

func (b bounds) NextState(st commands.State) commands.State {
	m := st.(*model).next()
	m.Min, m.Max = b.Min, b.Max
	return m
}

func (b bounds) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(b)
	if err := s.edit(func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.MinReplicas, p.Spec.MaxReplicas = b.Min, b.Max }); err != nil {
		return s.fail("setting the bounds: %v", err)
	}
	s.min, s.max = b.Min, b.Max
	s.highestMax = max(s.highestMax, b.Max)
	return s.look()
}

// relabel sets the pool's labels.
type relabel struct {
	base
	Labels labelSet
}

func (r relabel) String() string { return "Labels(" + r.Labels.String() + ")" }

func (r relabel) NextState(st commands.State) commands.State {
	m := st.(*model).next()
	m.Labels = r.Labels
	return m
}

func (r relabel) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(r)
	if err := s.edit(func(p *hypervisorv1alpha1.RunnerPool) { p.Spec.Labels = s.poolLabels(r.Labels) }); err != nil {
		return s.fail("setting the labels: %v", err)
	}
	s.labels = r.Labels
	return s.look()
}

// restart stops the operator and starts a new one: what the old one
// held in memory is gone, and deliveries sent meanwhile are refused.
type restart struct{ base }

func (restart) String() string                             { return "Restart" }
func (restart) NextState(st commands.State) commands.State { return st.(*model).next() }

func (c restart) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(c)
	if err := lab.StopManager(); err != nil {
		return s.fail("stopping the operator: %v", err)
	}
	if err := lab.StartManager(); err != nil {
		return s.fail("starting the operator again: %v", err)
	}
	return s.look()
}

// settle, the last command of every sequence, waits for the pool to serve
// what it can (as serve), then ends every job and waits for the pool to
// come back to minReplicas; its postcondition is the property's real
// check.
type settle struct{ base }

func (settle) String() string { return "Settle" }

func (settle) NextState(st commands.State) commands.State {
	m := st.(*model).next()
	for i := range m.Jobs {
		m.Jobs[i].Done = true
	}
	m.Settled = true
	return m
}

func (c settle) Run(sut commands.SystemUnderTest) commands.Result {
	s := sut.(*system)
	s.ran(c)
	if r := s.serve(); r.failure != "" || r.snap.safety() != "" {
		return r
	}
	return s.drain()
}

func (settle) PostCondition(st commands.State, res commands.Result) *gopter.PropResult {
	m, r := st.(*model), res.(result)
	if f := r.check(m); f != "" {
		return verdict(f)
	}
	sn := r.snap
	// The model, not the system's own mirror of it, says where the pool
	// must have come back to.
	switch {
	case int32(len(sn.claims)) != m.Min:
		return verdict(fmt.Sprintf("settled at %d runners, want minReplicas %d: %s", len(sn.claims), m.Min, sn))
	case sn.pool.Spec.MinReplicas != m.Min || sn.pool.Spec.MaxReplicas != m.Max:
		return verdict(fmt.Sprintf("the pool's bounds are %d..%d, the model's %d..%d", sn.pool.Spec.MinReplicas, sn.pool.Spec.MaxReplicas, m.Min, m.Max))
	}
	for _, j := range sn.jobs {
		if j.Status != githubsim.JobCompleted {
			return verdict(fmt.Sprintf("job %d is %s after the sequence ended every job", j.ID, j.Status))
		}
	}
	return verdict("")
}

// seq numbers the sequences: each has its own namespace, pool and labels,
// so no job or runner of one is taken for another's.
var seq atomic.Int64

// system is one sequence's pool and its jobs, and the spec it last set
// (the model's, mirrored for the waits).
type system struct {
	t          *testing.T
	c          client.Client
	n          int64
	ns, pool   string
	jobs       []int64
	min, max   int32
	highestMax int32
	labels     labelSet
	setupErr   error
	lastStep   time.Time
	started    time.Time
	history    []string
}

func newSystem(t *testing.T, m *model) *system {
	s := &system{t: t, c: testenv.Client(), n: seq.Add(1), min: m.Min, max: m.Max, highestMax: m.Max, labels: m.Labels, started: time.Now()}
	s.ns = testenv.Namespace(t)
	s.pool = fmt.Sprintf("pool%d", s.n)
	s.setupErr = s.setup()
	return s
}

func (s *system) label(k string) string { return fmt.Sprintf("s%d-%s", s.n, k) }

func (s *system) poolLabels(l labelSet) []string {
	return [][]string{{s.label("a")}, {s.label("b")}, {s.label("a"), s.label("b")}}[l]
}

func (s *system) jobLabels(k jobKind) []string {
	extra := [][]string{{s.label("a")}, {s.label("b")}, {s.label("a"), s.label("b")}, {s.label("c")}}[k]
	return append([]string{"self-hosted"}, extra...)
}

func (s *system) setup() error {
	owner, repoName, _ := strings.Cut(repo, "/")
	for _, obj := range []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"token": gh.PAT()},
		},
		&hypervisorv1alpha1.HypervisorCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "kv"},
			Spec:       hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt},
		},
		&hypervisorv1alpha1.HypervisorMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: "runner"},
			Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{
				ClusterRef: meta.LocalObjectReference{Name: "kv"},
				KubeVirt:   &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(runnerVM)}},
			},
		},
		&hypervisorv1alpha1.RunnerPool{
			ObjectMeta: metav1.ObjectMeta{Name: s.pool},
			Spec: hypervisorv1alpha1.RunnerPoolSpec{
				TemplateRef: meta.LocalObjectReference{Name: "runner"},
				GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: repoName,
					CredentialsRef: meta.LocalObjectReference{Name: "github-pat"}, APIURL: gh.URL() + "/"},
				Labels:      s.poolLabels(s.labels),
				MinReplicas: s.min, MaxReplicas: s.max,
				IdleTTL:             &metav1.Duration{Duration: idleTTL},
				RegistrationTimeout: &metav1.Duration{Duration: registrationTimeout},
				WebhookScaling:      &hypervisorv1alpha1.WebhookScaling{PollInterval: &metav1.Duration{Duration: pollInterval}},
			},
		},
	} {
		obj.SetNamespace(s.ns)
		if err := s.c.Create(rootCtx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	// A pool takes its scope's deliveries once its credentials were seen
	// to reach the scope; the sequence starts from there, its floor up.
	if ok, last := eventually.Within(serveTimeout, func() (bool, string) {
		sn, err := s.snapshot()
		if err != nil {
			return false, err.Error()
		}
		return sn.pool.Status.ReachedScope != "" && len(sn.claims) == int(s.min) && sn.idle() == int(s.min), sn.String()
	}); !ok {
		return fmt.Errorf("the new pool did not reach its scope with its %d runners: %s", s.min, last)
	}
	return nil
}

// destroy ends the sequence's jobs and deletes its pool, which takes its
// runners with it; the next sequence does not wait for that.
func (s *system) destroy() {
	s.t.Logf("sequence %d (%s): %s", s.n, time.Since(s.started).Round(100*time.Millisecond), strings.Join(s.history, ", "))
	for _, id := range s.jobs {
		if j, _ := gh.Job(id); j.Status != githubsim.JobCompleted {
			_ = gh.CancelJob(id)
		}
	}
	_ = s.c.Delete(rootCtx, &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.pool}})
}

// ran notes a command for the sequence's log line.
func (s *system) ran(c fmt.Stringer) { s.history = append(s.history, c.String()) }

func (s *system) fail(format string, args ...any) result {
	return result{failure: fmt.Sprintf(format, args...)}
}

func (s *system) edit(mutate func(*hypervisorv1alpha1.RunnerPool)) error {
	p := &hypervisorv1alpha1.RunnerPool{}
	if err := s.c.Get(rootCtx, client.ObjectKey{Namespace: s.ns, Name: s.pool}, p); err != nil {
		return err
	}
	before := p.DeepCopy()
	mutate(p)
	return s.c.Patch(rootCtx, p, client.MergeFrom(before))
}

// look takes a snapshot for a command's cheap checks.
func (s *system) look() result {
	if s.setupErr != nil {
		return result{failure: s.setupErr.Error()}
	}
	sn, err := s.snapshot()
	if err != nil {
		return s.fail("looking: %v", err)
	}
	return result{snap: sn}
}

// step moves the pools' clock by the poll interval, at most once a second
// of real time: the poll comes due (a lost delivery's job is found), idle
// runners pass their TTL, finished runners their grace.
func (s *system) step() {
	if time.Since(s.lastStep) >= time.Second {
		clk.Step(pollInterval)
		s.lastStep = time.Now()
	}
}

// serve waits until no job that fits the pool's labels is queued, or the
// pool's runners are busy up to maxReplicas.
func (s *system) serve() result {
	if s.setupErr != nil {
		return result{failure: s.setupErr.Error()}
	}
	var sn *snapshot
	ok, last := eventually.Within(serveTimeout, func() (bool, string) {
		s.step()
		var err error
		if sn, err = s.snapshot(); err != nil {
			return false, err.Error()
		}
		if f := sn.safety(); f != "" {
			return true, f
		}
		if waiting := sn.waiting(); len(waiting) > 0 && sn.busy() < int(s.max) {
			return false, fmt.Sprintf("jobs %v fit the pool and are queued with %d of max %d runners busy: %s", waiting, sn.busy(), s.max, sn)
		}
		// And the pool has scaled to what it wants (idle runners above it
		// retired past their TTL), keeping the busy ones above a lowered
		// maxReplicas.
		st := sn.pool.Status
		want := max(int(st.DesiredReplicas), sn.busy())
		return st.ObservedGeneration == sn.pool.Generation && int(st.Replicas) == want && len(sn.claims) == want && st.PendingReplicas == 0,
			fmt.Sprintf("the pool has not scaled to the %d runners it wants: %s", want, sn)
	})
	if !ok {
		return s.fail("not served within %s: %s", serveTimeout, last)
	}
	return result{snap: sn}
}

// drain ends every job of the sequence, then waits for the pool to come
// back to minReplicas, idle, with nothing left behind, and its status to
// say so.
func (s *system) drain() result {
	for _, id := range s.jobs {
		if j, _ := gh.Job(id); j.Status != githubsim.JobCompleted {
			if err := gh.CancelJob(id); err != nil {
				return s.fail("cancelling job %d: %v", id, err)
			}
		}
	}
	var sn *snapshot
	ok, last := eventually.Within(drainTimeout, func() (bool, string) {
		s.step()
		var err error
		if sn, err = s.snapshot(); err != nil {
			return false, err.Error()
		}
		if f := sn.safety(); f != "" {
			return true, ""
		}
		f := sn.settledAt(s.min)
		return f == "", f
	})
	if !ok {
		return s.fail("not settled within %s: %s", drainTimeout, last)
	}
	return result{snap: sn}
}

// snapshot is the sequence's part of everything: the pool, its claims,
// VMs, bootstrap Secrets and registrations, and its jobs on GitHub.
type snapshot struct {
	pool       *hypervisorv1alpha1.RunnerPool
	claims     []hypervisorv1alpha1.MachineClaim // not being deleted
	deleting   int
	vms        []string
	secrets    []string // bootstrap Secrets, by the claim they are for
	runners    []githubsim.Runner
	jobs       []githubsim.Job
	highestMax int32
}

func (s *system) snapshot() (*snapshot, error) {
	sn := &snapshot{pool: &hypervisorv1alpha1.RunnerPool{}, highestMax: s.highestMax}
	if err := s.c.Get(rootCtx, client.ObjectKey{Namespace: s.ns, Name: s.pool}, sn.pool); err != nil {
		return nil, err
	}
	var claims hypervisorv1alpha1.MachineClaimList
	if err := s.c.List(rootCtx, &claims, client.InNamespace(s.ns), client.MatchingLabels{runnerpool.PoolLabel: s.pool}); err != nil {
		return nil, err
	}
	for _, c := range claims.Items {
		if c.DeletionTimestamp != nil {
			sn.deleting++
			continue
		}
		sn.claims = append(sn.claims, c)
	}
	var vms kubevirtv1.VirtualMachineList
	if err := s.c.List(rootCtx, &vms, client.InNamespace(s.ns), ownerKind); err != nil {
		return nil, err
	}
	for _, vm := range vms.Items {
		sn.vms = append(sn.vms, vm.Name)
	}
	var secrets corev1.SecretList
	if err := s.c.List(rootCtx, &secrets, client.InNamespace(s.ns), client.MatchingLabels{runnerpool.PoolLabel: s.pool}); err != nil {
		return nil, err
	}
	for _, sec := range secrets.Items {
		sn.secrets = append(sn.secrets, sec.Labels[meta.ForClaimLabel])
	}
	for _, r := range gh.Runners() {
		if strings.HasPrefix(r.Name, s.pool+"-") {
			sn.runners = append(sn.runners, r)
		}
	}
	for _, id := range s.jobs {
		if j, ok := gh.Job(id); ok {
			sn.jobs = append(sn.jobs, j)
		}
	}
	return sn, nil
}

// safety is what must hold at every moment: no job failed (a runner's
// machine deleted under its job, as when a busy runner is retired), and
// no more runners than the largest maxReplicas the pool had. Runners
// above a lowered maxReplicas may still run their jobs, so the bound is
// the largest, not the current one.
func (sn *snapshot) safety() string {
	for _, j := range sn.jobs {
		if j.Conclusion == "failure" {
			return fmt.Sprintf("job %d failed on runner %s: a busy runner was retired; %s", j.ID, j.RunnerName, sn)
		}
	}
	if n := sn.machines(); n > int(sn.highestMax) {
		return fmt.Sprintf("%d runners, above the largest maxReplicas %d: %s", n, sn.highestMax, sn)
	}
	return ""
}

// machines counts the claims whose machine may run: maxReplicas bounds
// machines, and a claim that ended (Terminated or Failed) holds none, even
// while the pool keeps it a moment for its job's record.
func (sn *snapshot) machines() int {
	n := 0
	for _, c := range sn.claims {
		if c.Status.Phase != hypervisorv1alpha1.MachineTerminated && c.Status.Phase != hypervisorv1alpha1.MachineFailed {
			n++
		}
	}
	return n
}

// fits reports whether the pool's runners, as its spec says now, have
// every label job asks for.
func (sn *snapshot) fits(j githubsim.Job) bool {
	have := map[string]bool{}
	for _, l := range runnerstate.RunnerLabels(sn.pool) {
		have[strings.ToLower(l)] = true
	}
	for _, l := range j.Labels {
		if !have[strings.ToLower(l)] {
			return false
		}
	}
	return true
}

// waiting are the jobs queued on GitHub that fit the pool's labels.
func (sn *snapshot) waiting() []int64 {
	var out []int64
	for _, j := range sn.jobs {
		if j.Status == githubsim.JobQueued && sn.fits(j) {
			out = append(out, j.ID)
		}
	}
	return out
}

// busy counts the pool's runners running a job.
func (sn *snapshot) busy() int {
	n := 0
	for _, r := range sn.runners {
		if r.Busy {
			n++
		}
	}
	return n
}

// idle counts the pool's runners online and waiting for a job.
func (sn *snapshot) idle() int {
	n := 0
	for _, r := range sn.runners {
		if r.Status == "online" && !r.Busy {
			n++
		}
	}
	return n
}

// settledAt says what is not yet as it must be once every job is over:
// minReplicas runners, each an idle registration with its claim, VM and
// bootstrap Secret, nothing else, and the pool's status saying so.
func (sn *snapshot) settledAt(lo int32) string {
	names := map[string]bool{}
	for _, c := range sn.claims {
		names[c.Name] = true
	}
	st := sn.pool.Status
	ready := apimeta.FindStatusCondition(st.Conditions, meta.ReadyCondition)
	switch {
	case len(sn.claims) != int(lo) || sn.deleting > 0:
		return fmt.Sprintf("%d runners (%d being deleted), want minReplicas %d: %s", len(sn.claims), sn.deleting, lo, sn)
	case len(sn.runners) != int(lo) || sn.idle() != int(lo):
		return fmt.Sprintf("%d registrations, %d of them idle, want %d: %s", len(sn.runners), sn.idle(), lo, sn)
	case len(sn.vms) != int(lo):
		return fmt.Sprintf("%d VMs, want %d: %s", len(sn.vms), lo, sn)
	case len(sn.secrets) > int(lo):
		return fmt.Sprintf("%d bootstrap Secrets for %d runners: %s", len(sn.secrets), lo, sn)
	case st.ObservedGeneration != sn.pool.Generation || ready == nil || ready.Status != metav1.ConditionTrue:
		return fmt.Sprintf("the pool's status is not current and Ready: %s", sn)
	case st.Replicas != lo || st.DesiredReplicas != lo || st.IdleReplicas != lo || st.BusyReplicas != 0 ||
		st.PendingReplicas != 0 || st.QueuedJobs != 0 || st.PendingDeregistrations != 0:
		return fmt.Sprintf("the pool's status does not say %d idle runners and nothing queued: %s", lo, sn)
	}
	for _, r := range sn.runners {
		if !names[r.Name] {
			return fmt.Sprintf("registration %s has no runner claim: %s", r.Name, sn)
		}
	}
	for _, c := range sn.secrets {
		if !names[c] {
			return fmt.Sprintf("a bootstrap Secret for %q, no runner claim: %s", c, sn)
		}
	}
	return ""
}

func (sn *snapshot) String() string {
	var b strings.Builder
	st := sn.pool.Status
	fmt.Fprintf(&b, "pool %s min %d max %d labels %v: status desired %d replicas %d (pending %d idle %d busy %d) queued %d dereg %d gen %d/%d",
		sn.pool.Name, sn.pool.Spec.MinReplicas, sn.pool.Spec.MaxReplicas, sn.pool.Spec.Labels, st.DesiredReplicas, st.Replicas,
		st.PendingReplicas, st.IdleReplicas, st.BusyReplicas, st.QueuedJobs, st.PendingDeregistrations, st.ObservedGeneration, sn.pool.Generation)
	for _, c := range st.Conditions {
		if c.Type == meta.ReadyCondition {
			fmt.Fprintf(&b, " Ready=%s %s", c.Status, c.Reason)
		}
	}
	var claims []string
	for _, c := range sn.claims {
		claims = append(claims, c.Name+":"+string(c.Status.Phase))
	}
	fmt.Fprintf(&b, "; claims %v (+%d deleting); VMs %v; bootstrap Secrets for %v; registrations [", claims, sn.deleting, sn.vms, sn.secrets)
	for _, r := range sn.runners {
		fmt.Fprintf(&b, " %s:%s busy=%v", r.Name, r.Status, r.Busy)
	}
	b.WriteString(" ]; jobs [")
	for _, j := range sn.jobs {
		fmt.Fprintf(&b, " %d%v:%s", j.ID, j.Labels[1:], j.Status)
		if j.Conclusion != "" {
			b.WriteString("/" + j.Conclusion)
		}
		if j.RunnerName != "" {
			b.WriteString("@" + j.RunnerName)
		}
	}
	b.WriteString(" ]")
	return b.String()
}

// The smallest sequence the property found: an idle runner registered
// with the pool's old labels counted as the runner of a job queued with
// the new ones, which it cannot take, so the job waited for ever. The pool
// now retires such idle runners and makes runners with its labels.
func TestRelabelledPoolServesJobsOfItsNewLabels(t *testing.T) {
	replay(t, &model{Min: 1, Max: 2, Labels: poolB}, relabel{Labels: poolA}, queue{Kind: jobA}, settle{})
}

// The smallest sequence the property found next: a runner the pool retired
// (its labels dropped) had taken a job since the listing the pool sorted
// by, so GitHub refused its deregistration; it kept its job, but the pool
// no longer counted it and made its replacement beside it, going past
// maxReplicas. A runner kept busy now counts as busy.
func TestRunnerKeptBusyAtRetirementCountsTowardMax(t *testing.T) {
	replay(t, &model{Min: 2, Max: 2, Labels: poolB}, serve{}, queue{Kind: jobB}, relabel{Labels: poolA}, serve{}, settle{})
}

// The third: after a restart the pool remembers no runner it saw online,
// so runners whose job had just ended stood as finished claims, their
// machines still ending, while the pool made their replacements beside
// them, above maxReplicas. A finished runner's machine that has not ended
// now holds its place under maxReplicas.
func TestFinishedRunnersStillEndingCountTowardMax(t *testing.T) {
	replay(t, &model{Min: 0, Max: 3, Labels: poolA}, queue{Kind: jobA, Lost: true}, bounds{Min: 2, Max: 2}, queue{Kind: jobA}, serve{}, restart{}, settle{})
}

// replay runs one sequence the property found, as it shrank it: from
// initial, the steps in order (the last one Settle), checked as the
// property checks every sequence.
func replay(t *testing.T, initial *model, steps ...commands.Command) {
	proptest.CheckSequences(t, 1, len(steps), len(steps)+1, 0, func(p *gopter.Properties) {
		p.Property("replayed", commands.Prop(&commands.ProtoCommands{
			NewSystemUnderTestFunc:     func(initial commands.State) commands.SystemUnderTest { return newSystem(t, initial.(*model)) },
			DestroySystemUnderTestFunc: func(s commands.SystemUnderTest) { s.(*system).destroy() },
			InitialStateGen:            gen.Const(initial),
			GenCommandFunc: func(st commands.State) gopter.Gen {
				return gen.Const(steps[min(st.(*model).Steps, len(steps)-1)])
			},
		}))
	})
}
