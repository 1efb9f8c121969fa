package githubsim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actions/scaleset"
	"github.com/actions/scaleset/listener"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
)

const scaleSetPAT = "ghp_scalesetscalesetscalesetscaleset0001"

// startScaleSetSim starts a simulator whose polls answer 202 after a
// short wait, and a scale-set client of GitHub's own for acme/widgets.
func startScaleSetSim(t *testing.T, opts githubsim.Options) (*githubsim.Server, *scaleset.Client) {
	t.Helper()
	opts.PersonalAccessTokens = append(opts.PersonalAccessTokens, scaleSetPAT)
	if opts.MessagePollWait == 0 {
		opts.MessagePollWait = 300 * time.Millisecond
	}
	srv := githubsim.New(opts)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := scaleset.NewClientWithPersonalAccessToken(scaleset.NewClientWithPersonalAccessTokenConfig{
		GitHubConfigURL: srv.URL() + "acme/widgets", PersonalAccessToken: scaleSetPAT,
		SystemInfo: scaleset.SystemInfo{System: "hyperfleet-test", Version: "0.0.0"},
	}, scaleset.WithRetryMax(0))
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

// newScaleSet registers a scale set named name in the default group.
func newScaleSet(t *testing.T, c *scaleset.Client, name string, labels ...string) *scaleset.RunnerScaleSet {
	t.Helper()
	ctx := context.Background()
	group, err := c.GetRunnerGroupByName(ctx, scaleset.DefaultRunnerGroup)
	if err != nil {
		t.Fatalf("runner group %q: %v", scaleset.DefaultRunnerGroup, err)
	}
	want := &scaleset.RunnerScaleSet{Name: name, RunnerGroupID: group.ID}
	for _, l := range labels {
		want.Labels = append(want.Labels, scaleset.Label{Name: l})
	}
	ss, err := c.CreateRunnerScaleSet(ctx, want)
	if err != nil {
		t.Fatalf("creating scale set %s: %v", name, err)
	}
	return ss
}

// scaler plays the autoscaler behind the listener: it makes a runner with
// a JIT config of the scale set for each one the statistics ask for more,
// and starts it on the simulator.
type scaler struct {
	t   *testing.T
	srv *githubsim.Server
	c   *scaleset.Client
	ss  int

	mu        sync.Mutex
	made      int
	desired   []int
	started   []string
	completed []string
}

func (s *scaler) HandleJobStarted(_ context.Context, j *scaleset.JobStarted) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started = append(s.started, j.RunnerName)
	return nil
}

func (s *scaler) HandleJobCompleted(_ context.Context, j *scaleset.JobCompleted) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.completed = append(s.completed, j.Result+" on "+j.RunnerName)
	return nil
}

func (s *scaler) HandleDesiredRunnerCount(ctx context.Context, count int) (int, error) {
	s.mu.Lock()
	s.desired = append(s.desired, count)
	more := count - s.made
	s.mu.Unlock()
	for range more {
		s.mu.Lock()
		s.made++
		name := "hf-runner-" + string(rune('a'+s.made-1))
		s.mu.Unlock()
		jit, err := s.c.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, s.ss)
		if err != nil {
			return 0, err
		}
		if jit.Runner == nil || jit.Runner.Name != name || jit.Runner.RunnerScaleSetID != s.ss || jit.EncodedJITConfig == "" {
			s.t.Errorf("JIT config for %s: %+v", name, jit.Runner)
		}
		if _, err := s.srv.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.EncodedJITConfig}); err != nil {
			return 0, err
		}
	}
	return count, nil
}

// GitHub's own scale-set client and listener, unmodified, serve a job on
// the simulator end to end: the registration-token exchange, the default
// runner group, a scale set created and found by name, one message session
// (a second is refused with GitHub's conflict), the job offered, acquired
// and assigned (TotalAssignedJobs), a JIT runner of the scale set taking
// it, JobStarted and JobCompleted, the statistics back to zero, and the
// session and scale set deleted.
func TestScaleSetClientServesAJob(t *testing.T) {
	srv, c := startScaleSetSim(t, githubsim.Options{JobDuration: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss := newScaleSet(t, c, "hf-linux", "hf-linux", "linux")
	found, err := c.GetRunnerScaleSet(ctx, ss.RunnerGroupID, "hf-linux")
	if err != nil || found == nil || found.ID != ss.ID || len(found.Labels) != 2 {
		t.Fatalf("scale set by name: %+v, %v; created %+v", found, err, ss)
	}

	session, err := c.MessageSessionClient(ctx, ss.ID, "hyperfleet-a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MessageSessionClient(ctx, ss.ID, "hyperfleet-b"); err == nil || !strings.Contains(err.Error(), "RunnerScaleSetSessionConflictException") {
		t.Fatalf("a second session on the scale set: %v, want GitHub's session conflict", err)
	}

	job, err := srv.QueueJob("acme/widgets", []string{"hf-linux"})
	if err != nil {
		t.Fatal(err)
	}
	// A job the scale set's labels do not cover is not its.
	if _, err := srv.QueueJob("acme/widgets", []string{"hf-linux", "gpu"}); err != nil {
		t.Fatal(err)
	}
	sc := &scaler{t: t, srv: srv, c: c, ss: ss.ID}
	l, err := listener.New(session, listener.Config{ScaleSetID: ss.ID, MaxRunners: 5})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, sc) }()

	eventually.That(t, 30*time.Second, func() (bool, string) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		j, _ := srv.Job(job)
		last := -1
		if len(sc.desired) > 0 {
			last = sc.desired[len(sc.desired)-1]
		}
		return j.Status == githubsim.JobCompleted && len(sc.completed) == 1 && last == 0,
			fmt.Sprintf("job %s, desired counts %v, started %v, completed %v", j.Status, sc.desired, sc.started, sc.completed)
	})
	sc.mu.Lock()
	if len(sc.started) != 1 || sc.started[0] != "hf-runner-a" || sc.completed[0] != "succeeded on hf-runner-a" || sc.made != 1 {
		t.Errorf("started %v, completed %v, runners made %d: want one runner, hf-runner-a, to run the job", sc.started, sc.completed, sc.made)
	}
	if !slices.Contains(sc.desired, 1) {
		t.Errorf("desired counts %v: TotalAssignedJobs never said 1", sc.desired)
	}
	sc.mu.Unlock()

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("listener: %v", err)
	}
	if err := session.Close(context.Background()); err != nil {
		t.Fatalf("deleting the session: %v", err)
	}
	if err := c.DeleteRunnerScaleSet(context.Background(), ss.ID); err != nil {
		t.Fatalf("deleting the scale set: %v", err)
	}
	if left := srv.ScaleSets(); len(left) != 0 {
		t.Fatalf("scale sets left: %+v", left)
	}
}

// A backlog larger than one message is sent over several of at most 50
// job messages, while each message's statistics count all of it; a message
// not acknowledged is delivered again; an expired queue token is renewed
// by the client (401, then a session refresh) without losing anything.
func TestScaleSetMessagesAreCappedAndRedelivered(t *testing.T) {
	srv, c := startScaleSetSim(t, githubsim.Options{})
	ctx := context.Background()
	ss := newScaleSet(t, c, "burst")
	if _, err := srv.QueueRun(githubsim.JobSpec{Repo: "acme/widgets", Labels: []string{"burst"}, Matrix: 120}); err != nil {
		t.Fatal(err)
	}
	session, err := c.MessageSessionClient(ctx, ss.ID, "hyperfleet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Close(context.Background()) })
	if st := session.Session().Statistics; st == nil || st.TotalAvailableJobs != 120 || st.TotalAssignedJobs != 0 {
		t.Fatalf("the new session's statistics: %+v, want 120 available, none assigned", st)
	}

	first, err := session.GetMessage(ctx, 0, 10)
	if err != nil || first == nil {
		t.Fatalf("first message: %v, %v", first, err)
	}
	if n := len(first.JobAvailableMessages); n != 50 || first.Statistics.TotalAvailableJobs != 120 {
		t.Fatalf("first message: %d JobAvailable, statistics %+v; want 50 and all 120 counted", n, first.Statistics)
	}
	// Not acknowledged: asked again from the start, it comes again.
	again, err := session.GetMessage(ctx, 0, 10)
	if err != nil || again == nil || again.MessageID != first.MessageID {
		t.Fatalf("unacknowledged message asked again: %+v, %v; want message %d", again, err, first.MessageID)
	}
	if err := session.DeleteMessage(ctx, first.MessageID); err != nil {
		t.Fatal(err)
	}

	srv.ExpireSessionTokens()
	second, err := session.GetMessage(ctx, first.MessageID, 10)
	if err != nil || second == nil || len(second.JobAvailableMessages) != 50 {
		t.Fatalf("second message after the queue token expired: %+v, %v", second, err)
	}
	if n := srv.Stats()[githubsim.EndpointSessionRefresh]; n != 1 {
		t.Errorf("%d session refreshes, want 1 (after the 401)", n)
	}
	ids := make([]int64, 0, 50)
	for _, m := range second.JobAvailableMessages {
		ids = append(ids, m.RunnerRequestID)
	}
	got, err := session.AcquireJobs(ctx, ids)
	if err != nil || len(got) != 50 {
		t.Fatalf("acquiring 50 jobs: %d, %v", len(got), err)
	}
	if err := session.DeleteMessage(ctx, second.MessageID); err != nil {
		t.Fatal(err)
	}
	third, err := session.GetMessage(ctx, second.MessageID, 10)
	if err != nil || third == nil {
		t.Fatalf("third message: %v, %v", third, err)
	}
	if len(third.JobAvailableMessages) != 20 || len(third.JobAssignedMessages) != 30 ||
		third.Statistics.TotalAssignedJobs != 50 || third.Statistics.TotalAvailableJobs != 70 {
		t.Fatalf("third message: %d available, %d assigned, statistics %+v; want the last 20 offers, 30 of the 50 assignments, 50 assigned and 70 available",
			len(third.JobAvailableMessages), len(third.JobAssignedMessages), third.Statistics)
	}
	// Nothing new: the poll waits, then 202 (nil).
	if err := session.DeleteMessage(ctx, third.MessageID); err != nil {
		t.Fatal(err)
	}
	fourth, err := session.GetMessage(ctx, third.MessageID, 10)
	if err != nil || fourth == nil || len(fourth.JobAssignedMessages) != 20 {
		t.Fatalf("fourth message: %+v, %v; want the last 20 assignments", fourth, err)
	}
	if err := session.DeleteMessage(ctx, fourth.MessageID); err != nil {
		t.Fatal(err)
	}
	if m, err := session.GetMessage(ctx, fourth.MessageID, 10); m != nil || err != nil {
		t.Fatalf("an empty queue's poll: %+v, %v; want 202 (nil, nil)", m, err)
	}
}

// A busy runner cannot be removed (GitHub's JobStillRunningException, which
// the client turns into JobStillRunningError); an idle one can, and is
// then not found (RunnerNotFoundError).
func TestScaleSetRunnerRemoval(t *testing.T) {
	srv, c := startScaleSetSim(t, githubsim.Options{JobDuration: time.Hour})
	ctx := context.Background()
	ss := newScaleSet(t, c, "removal")
	busy, err := c.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "busy"}, ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := c.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "idle"}, ss.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: "idle"}, ss.ID); !errors.Is(err, scaleset.RunnerExistsError) {
		t.Fatalf("a second runner named idle: %v, want RunnerExistsError", err)
	}
	session, err := c.MessageSessionClient(ctx, ss.ID, "hyperfleet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Close(context.Background()) })
	job, err := srv.QueueJob("acme/widgets", []string{"removal"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := session.AcquireJobs(ctx, []int64{job}); err != nil || len(got) != 1 {
		t.Fatalf("acquiring job %d: %v, %v", job, got, err)
	}
	if _, err := srv.RunRunner(ctx, githubsim.RunRequest{JITConfig: busy.EncodedJITConfig}); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		j, _ := srv.Job(job)
		return j.RunnerName == "busy", "job " + j.Status + " on " + j.RunnerName
	})
	if err := c.RemoveRunner(ctx, int64(busy.Runner.ID)); !errors.Is(err, scaleset.JobStillRunningError) {
		t.Fatalf("removing the busy runner: %v, want JobStillRunningError", err)
	}
	byName, err := c.GetRunnerByName(ctx, "idle")
	if err != nil || byName == nil || byName.ID != idle.Runner.ID || byName.RunnerScaleSetID != ss.ID {
		t.Fatalf("runner idle by name: %+v, %v", byName, err)
	}
	if err := c.RemoveRunner(ctx, int64(idle.Runner.ID)); err != nil {
		t.Fatalf("removing the idle runner: %v", err)
	}
	if _, err := c.GetRunner(ctx, idle.Runner.ID); !errors.Is(err, scaleset.RunnerNotFoundError) {
		t.Fatalf("the removed runner: %v, want RunnerNotFoundError", err)
	}
}

// The known faults an autoscaler must survive: a JobCompleted while the
// job still runs (the runner stays busy, a second JobCompleted comes at
// the real end), a cancelled job's runner left registered and offline (a
// ghost), and job messages lost while the statistics stay true.
func TestScaleSetFaults(t *testing.T) {
	srv, c := startScaleSetSim(t, githubsim.Options{JobDuration: time.Hour})
	ctx := context.Background()
	ss := newScaleSet(t, c, "faults")
	session, err := c.MessageSessionClient(ctx, ss.ID, "hyperfleet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = session.Close(context.Background()) })
	ids, err := srv.QueueRun(githubsim.JobSpec{Repo: "acme/widgets", Labels: []string{"faults"}, Matrix: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := session.AcquireJobs(ctx, ids); err != nil || len(got) != 2 {
		t.Fatalf("acquiring: %v, %v", got, err)
	}
	for _, name := range []string{"early", "ghost"} {
		jit, err := c.GenerateJitRunnerConfig(ctx, &scaleset.RunnerScaleSetJitRunnerSetting{Name: name}, ss.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.RunRunner(ctx, githubsim.RunRequest{JITConfig: jit.EncodedJITConfig}); err != nil {
			t.Fatal(err)
		}
	}
	jobOf := map[string]int64{}
	eventually.That(t, 10*time.Second, func() (bool, string) {
		for _, id := range ids {
			if j, _ := srv.Job(id); j.RunnerName != "" {
				jobOf[j.RunnerName] = id
			}
		}
		return len(jobOf) == 2, fmt.Sprintf("jobs taken: %v", jobOf)
	})
	drain := func() []string {
		t.Helper()
		var seen []string
		last := 0
		for {
			m, err := session.GetMessage(ctx, last, 2)
			if err != nil {
				t.Fatal(err)
			}
			if m == nil {
				return seen
			}
			for _, x := range m.JobCompletedMessages {
				seen = append(seen, x.Result+" "+x.RunnerName)
			}
			if err := session.DeleteMessage(ctx, m.MessageID); err != nil {
				t.Fatal(err)
			}
			last = m.MessageID
		}
	}
	drain()

	if err := srv.CompleteEarly(jobOf["early"]); err != nil {
		t.Fatal(err)
	}
	if got := drain(); !slices.Equal(got, []string{"succeeded early"}) {
		t.Fatalf("JobCompleted messages after the early one: %v", got)
	}
	if j, _ := srv.Job(jobOf["early"]); j.Status != githubsim.JobInProgress {
		t.Fatalf("the job ended with its early JobCompleted: %s", j.Status)
	}
	if err := c.RemoveRunner(ctx, runnerID(t, srv, "early")); !errors.Is(err, scaleset.JobStillRunningError) {
		t.Fatalf("removing the runner after the early JobCompleted: %v, want JobStillRunningError", err)
	}

	if err := srv.CancelLeavingGhost(jobOf["ghost"]); err != nil {
		t.Fatal(err)
	}
	if got := drain(); !slices.Equal(got, []string{"canceled ghost"}) {
		t.Fatalf("JobCompleted messages after the cancel: %v", got)
	}
	ghost, err := c.GetRunnerByName(ctx, "ghost")
	if err != nil || ghost == nil {
		t.Fatalf("the ghost runner is not registered: %+v, %v", ghost, err)
	}
	if err := c.RemoveRunner(ctx, int64(ghost.ID)); err != nil {
		t.Fatalf("removing the ghost: %v", err)
	}

	if _, err := srv.QueueRun(githubsim.JobSpec{Repo: "acme/widgets", Labels: []string{"faults"}, Matrix: 3}); err != nil {
		t.Fatal(err)
	}
	if n := srv.DropScaleSetMessages("faults"); n != 3 {
		t.Fatalf("%d messages dropped, want the 3 offers", n)
	}
	m, err := session.GetMessage(ctx, 0, 2)
	if err != nil || m != nil {
		t.Fatalf("a poll after the offers were lost: %+v, %v; want nothing", m, err)
	}
	if got, err := c.GetRunnerScaleSetByID(ctx, ss.ID); err != nil || got.Statistics == nil || got.Statistics.TotalAvailableJobs != 3 {
		t.Fatalf("the scale set's statistics after the lost offers: %+v, %v; want 3 available", got, err)
	}
}

// runnerID is the ID of the registered runner named name.
func runnerID(t *testing.T, srv *githubsim.Server, name string) int64 {
	t.Helper()
	for _, r := range srv.Runners() {
		if r.Name == name {
			return r.ID
		}
	}
	t.Fatalf("no runner %s", name)
	return 0
}
