package attested_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim"
	"github.com/hyperfleet/hyperfleet/internal/sim/runnersim/runnersimtest"
	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

const repo = "acme/attested"

// TestRunnerGetsItsJITConfigOnlyAfterAttesting is the runner path end to
// end with the real pieces: the RunnerPool makes a runner whose user data
// holds a join token and no JIT config; the real hyperfleet-bootstrap
// (a process) attests through a real spire-agent, fetches the JIT config
// over mTLS with the SVID minted for its claim, runs the (fake) runner as
// an unprivileged user, and the runner takes a job from githubsim.
func TestRunnerGetsItsJITConfigOnlyAfterAttesting(t *testing.T) {
	r := newRig(t, rigOptions{runners: true})
	gh := githubsim.New(githubsim.Options{Repositories: []string{repo}, JobDuration: 300 * time.Millisecond, RateLimit: 50000})
	if err := gh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	vms := startRunnerVMs(t, r, gh)
	agents := vms.agents
	runnerTemplateAndPool(t, r, gh, 0, 1, false)
	id, err := gh.QueueJob(repo, []string{"self-hosted", "attested"})
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 3*time.Minute, func() (bool, string) {
		j, ok := gh.Job(id)
		if errs := agents.Errors(); len(errs) > 0 {
			return false, fmt.Sprintf("agent errors: %v", errs)
		}
		return ok && j.Status == "completed", fmt.Sprintf("job %+v", j)
	})
	j, _ := gh.Job(id)
	console, ud := vms.of(j.RunnerName)
	if console == nil {
		t.Fatalf("the job ran on %q, which no agent process served", j.RunnerName)
	}
	cfg, err := runnerconfig.ParseUserData(ud)
	if err != nil {
		t.Fatalf("the runner's user data: %v", err)
	}
	if cfg.JITConfig != "" || cfg.Token != "" || cfg.Name != j.RunnerName {
		t.Fatalf("the runner's user data carried a JIT config (%v) or a token (%v), or is not %s's (%s)", cfg.JITConfig != "", cfg.Token != "", j.RunnerName, cfg.Name)
	}
	var events corev1.EventList
	if err := r.lab.C.List(context.Background(), &events, client.InNamespace(r.lab.NS)); err != nil {
		t.Fatal(err)
	}
	released := false
	for _, e := range events.Items {
		released = released || e.Reason == "CredentialsReleased" && e.InvolvedObject.Name == j.RunnerName
	}
	if !released {
		t.Fatalf("no CredentialsReleased event for %s", j.RunnerName)
	}
	out := console.String()
	for _, want := range []string{"attested", "credentials received"} {
		if !strings.Contains(strings.ToLower(out), want) {
			t.Errorf("the agent's console does not say %q:\n%s", want, out)
		}
	}
}

// runnerVMs are the machines of the rig's runners and standby machines:
// each runs the real hyperfleet-bootstrap, through a real spire-agent,
// and a fake runner that takes jobs from githubsim.
type runnerVMs struct {
	agents   *runnersim.Agents
	mu       sync.Mutex
	consoles map[string]*runnersimtest.Console // by the claim a machine was made for
	uds      map[string]string
}

// of is the console and user data of the machine that claim was made for.
func (v *runnerVMs) of(claim string) (*runnersimtest.Console, string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.consoles[claim], v.uds[claim]
}

func startRunnerVMs(t *testing.T, r *rig, gh *githubsim.Server) *runnerVMs {
	t.Helper()
	v := &runnerVMs{consoles: map[string]*runnersimtest.Console{}, uds: map[string]string{}}
	mu, consoles, uds := &v.mu, v.consoles, v.uds
	agent, fakeRunner := runnersimtest.BuildAgent(t)
	base, err := os.MkdirTemp("", "hfvm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65534, 65534
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	userData := func(ctx context.Context, c *hypervisorv1alpha1.MachineClaim) (string, error) {
		ud, err := runnersim.SecretUserData(ctx, r.lab.C, c)
		if err == nil {
			mu.Lock()
			uds[c.Name] = ud
			mu.Unlock()
		}
		return ud, err
	}
	agents := &runnersim.Agents{Client: testenv.Client(), GitHub: gh, Namespace: r.lab.NS, Log: logr.Discard(), UserData: userData,
		PowerOff: func(_ context.Context, c *hypervisorv1alpha1.MachineClaim) error {
			return kvSim.GuestShutdown(c.Namespace, c.Status.MachineName)
		},
		Process: func(c *hypervisorv1alpha1.MachineClaim) *runnersim.Process {
			root, install := runnersimtest.VMRoot(t, base, c.Name, fakeRunner)
			console := &runnersimtest.Console{}
			mu.Lock()
			consoles[c.Name] = console
			mu.Unlock()
			agentDir, err := os.MkdirTemp("", "hfag")
			if err != nil {
				t.Error(err)
				return nil
			}
			t.Cleanup(func() { _ = os.RemoveAll(agentDir) })
			return &runnersim.Process{
				Agent: agent, Root: root, Console: console,
				Runner:     runnerconfig.Runner{InstallDir: install, User: fmt.Sprintf("%d:%d", uid, gid)},
				Env:        append(os.Environ(), "FAKERUNNER_VM_ROOT="+root),
				SPIREAgent: filepath.Join(spiretest.Dir(t), "spire-agent"), AgentDir: agentDir,
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	agents.Start(ctx)

	v.agents = agents
	return v
}

// runnerTemplateAndPool makes the lab's template attest and run GitHub
// runners, keeping hot standby machines, and a pool of it.
func runnerTemplateAndPool(t *testing.T, r *rig, gh *githubsim.Server, hot, maxReplicas int32, scaleSet bool) {
	t.Helper()
	r.attest(nil)
	// The template's machines run GitHub runners.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "ubuntu", Namespace: r.lab.NS}}
		if err := r.lab.Get(tmpl); err != nil {
			return err
		}
		tmpl.Spec.Workload = &hypervisorv1alpha1.WorkloadConfig{Type: hypervisorv1alpha1.WorkloadGitHubRunner,
			GitHubRunner: &hypervisorv1alpha1.GitHubRunnerWorkload{}}
		if hot > 0 {
			tmpl.Spec.Standby = &hypervisorv1alpha1.StandbySpec{Hot: hot}
		}
		return r.lab.C.Update(context.Background(), tmpl)
	}); err != nil {
		t.Fatal(err)
	}
	r.lab.Create(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
		StringData: map[string]string{"token": gh.PAT()},
	})
	owner, name, _ := strings.Cut(repo, "/")
	// With hot machines the pool keeps no idle runner: a registered runner
	// holds its JIT config while it idles, a hot machine holds nothing.
	minReplicas := int32(1)
	if hot > 0 {
		minReplicas = 0
	}
	pool := &hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Name: "attested"},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{
			TemplateRef: meta.LocalObjectReference{Name: "ubuntu"},
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: name,
				CredentialsRef: meta.LocalObjectReference{Name: "github-pat"}, APIURL: gh.URL() + "/"},
			Labels:      []string{"attested"},
			MinReplicas: minReplicas, MaxReplicas: maxReplicas,
		},
	}
	if scaleSet {
		// Jobs select the scale set by its name (runs-on: attested).
		pool.Spec.Labels = nil
		pool.Spec.GitHub.ScaleSet = &hypervisorv1alpha1.ScaleSetSpec{Name: "attested"}
	}
	r.lab.Create(pool)
	t.Cleanup(func() { _ = r.lab.C.Delete(context.Background(), pool) })
}

// TestHotRunnerMachineGetsItsJITConfigOnlyOnAssignment: the runner
// template keeps a hot machine. It boots, its real agent attests, and it
// waits holding nothing: no JIT config in its user data or any Secret of
// its own, no runner registered with GitHub. A queued job makes the pool
// create a runner, whose claim takes the hot machine; only then does the
// machine get the runner's JIT config, and the job runs on it.
// Both ways a pool learns of a job: GitHub's job list (as a webhook
// delivery does, through the same runner creation), and the scale set's
// session, which assigns the job to the pool.
func TestHotRunnerMachineGetsItsJITConfigOnlyOnAssignment(t *testing.T) {
	for _, mode := range []struct {
		name     string
		scaleSet bool
		labels   []string
	}{
		{name: "jobs listed", labels: []string{"self-hosted", "attested"}},
		{name: "scale set", scaleSet: true, labels: []string{"attested"}},
	} {
		t.Run(mode.name, func(t *testing.T) { hotRunnerMachine(t, mode.scaleSet, mode.labels) })
	}
}

func hotRunnerMachine(t *testing.T, scaleSet bool, jobLabels []string) {
	r := newRig(t, rigOptions{runners: true})
	gh := githubsim.New(githubsim.Options{Repositories: []string{repo}, JobDuration: 300 * time.Millisecond, RateLimit: 50000})
	if err := gh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gh.Close)
	vms := startRunnerVMs(t, r, gh)
	runnerTemplateAndPool(t, r, gh, 1, 2, scaleSet)

	// The hot machine: attested, waiting, holding nothing.
	var hot hypervisorv1alpha1.MachineClaim
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		if errs := vms.agents.Errors(); len(errs) > 0 {
			return false, fmt.Sprintf("agent errors: %v", errs)
		}
		var list hypervisorv1alpha1.MachineClaimList
		if err := r.lab.C.List(context.Background(), &list, client.InNamespace(r.lab.NS), client.HasLabels{standby.TemplateLabel}); err != nil {
			return false, err.Error()
		}
		for _, c := range list.Items {
			if st := c.Status.Attestation; st != nil && st.Phase == hypervisorv1alpha1.AttestationAttested && c.Status.Phase == hypervisorv1alpha1.MachineReady {
				hot = c
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d standby claims, none Ready and attested", len(list.Items))
	})
	if runners := gh.Runners(); len(runners) != 0 {
		t.Fatalf("GitHub lists %d runners while the pool idles on a hot machine: %+v", len(runners), runners)
	}
	console, ud := vms.of(hot.Name)
	if console == nil {
		t.Fatalf("no agent runs on the hot machine %s", hot.Status.MachineName)
	}
	cfg, err := runnerconfig.ParseUserData(ud)
	if err != nil || cfg.JITConfig != "" || cfg.Token != "" {
		t.Fatalf("the hot machine's user data: %+v (%v); want a runner configuration without a credential", cfg, err)
	}
	var secrets corev1.SecretList
	if err := r.lab.C.List(context.Background(), &secrets, client.InNamespace(r.lab.NS)); err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets.Items {
		for k, v := range sec.Data {
			if strings.Contains(string(v), "jitConfig") || strings.Contains(k, "credentials") && sec.Labels[meta.ForClaimLabel] == hot.Name {
				t.Errorf("Secret %s key %s holds a runner credential while no job was assigned", sec.Name, k)
			}
		}
	}
	if out := strings.ToLower(console.String()); !strings.Contains(out, "standby") || strings.Contains(out, "credentials received") {
		t.Fatalf("the hot machine's agent does not say it waits on standby, or received credentials:\n%s", console.String())
	}

	id, err := gh.QueueJob(repo, jobLabels)
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		j, ok := gh.Job(id)
		if errs := vms.agents.Errors(); len(errs) > 0 {
			return false, fmt.Sprintf("agent errors: %v", errs)
		}
		return ok && j.Status == "completed", fmt.Sprintf("job %+v", j)
	})
	j, _ := gh.Job(id)
	runner := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: j.RunnerName, Namespace: r.lab.NS}}
	if err := r.lab.Get(runner); err != nil {
		t.Fatalf("the job ran on %s, which is no claim: %v", j.RunnerName, err)
	}
	if runner.Status.MachineName != hot.Status.MachineName {
		t.Fatalf("the job's runner %s runs on machine %s; want the hot machine %s", runner.Name, runner.Status.MachineName, hot.Status.MachineName)
	}
	if out := strings.ToLower(console.String()); !strings.Contains(out, "credentials received") {
		t.Errorf("the hot machine's agent does not say it received the runner's credentials:\n%s", console.String())
	}
}
