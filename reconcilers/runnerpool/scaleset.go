package runnerpool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	ghscaleset "github.com/actions/scaleset"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
	"github.com/hyperfleet/hyperfleet/reconcilers/conditions"
	"github.com/hyperfleet/hyperfleet/reconcilers/runnerstate"
	"github.com/hyperfleet/hyperfleet/reconcilers/scalesetlistener"
	"github.com/hyperfleet/hyperfleet/reconcilers/skeleton"
)

// scaleSetRecheck is how often a steady scale-set pool reads its scale set
// from GitHub again (two requests): often enough to make again one deleted
// outside HyperFleet, seldom enough to cost nothing next to the session.
const scaleSetRecheck = 10 * time.Minute

func scaleSetMode(pool *hypervisorv1alpha1.RunnerPool) bool { return runnerstate.ScaleSetMode(pool) }

// scaleSetWant is the scale set the pool asks for. Its labels are the
// pool's (or the scale set's name) and the pool's own registration label:
// a job asks for a subset of a scale set's labels, so the pool's label
// takes no job away, and it marks the scale set's runners in GitHub's
// listing as this pool's (runnerstate.Ours), as the webhook mode's carry it.
func scaleSetWant(pool *hypervisorv1alpha1.RunnerPool) scaleset.Want {
	name := pool.Spec.GitHub.ScaleSet.Name
	labels := append([]string(nil), pool.Spec.Labels...)
	if len(labels) == 0 {
		labels = []string{name}
	}
	labels = append(labels, runnerstate.PoolRunnerLabel(pool))
	w := scaleset.Want{Name: name, RunnerGroup: pool.Spec.RunnerGroup, Labels: labels}
	if st := pool.Status.ScaleSet; st != nil {
		w.Known = int(st.ID)
	}
	return w
}

// ensureScaleSet makes the pool's scale set exist as its spec says
// (scaleset.Ensure), at most every scaleSetRecheck once steady, and keeps
// the pool's listener on it. One found under the name that the pool did not
// make is adopted, brought in step, and never deleted with the pool.
func (r *Reconciler) ensureScaleSet(ctx context.Context, s *scope) (skeleton.Result, error) {
	pool := s.pool
	if !scaleSetMode(pool) {
		return skeleton.Continue(), nil
	}
	c, err := r.GitHub.ScaleSetClient(ctx, pool)
	if err == nil {
		s.scaleSets = c
		err = r.keepScaleSet(ctx, s, c)
	}
	var taken *scaleSetTakenError
	switch {
	case errors.As(err, &taken):
		s.scaleSetTaken = taken
		return skeleton.StopAndRequeue(time.Minute), nil
	case err != nil:
		s.githubErr = fmt.Errorf("scale set %q: %w", pool.Spec.GitHub.ScaleSet.Name, err)
		_, after := githubOutcome(err)
		return skeleton.StopAndRequeue(after), nil
	}
	return skeleton.Continue(), nil
}

func (r *Reconciler) keepScaleSet(ctx context.Context, s *scope, c *ghscaleset.Client) error {
	pool, mem := s.pool, s.mem
	st := pool.Status.ScaleSet
	if st != nil && st.ID != 0 && mem.scaleSetGen == pool.Generation && s.now.Sub(mem.scaleSetAt) < scaleSetRecheck {
		return nil
	}
	want := scaleSetWant(pool)
	set, out, err := scaleset.Ensure(ctx, c, want)
	if err != nil {
		return err
	}
	created := st != nil && st.Created
	switch out {
	case scaleset.Found:
		// Made by someone else, or by this pool before its status said
		// so: either way not known to be this pool's, so never deleted
		// with it. Brought in step under the pool's ID — unless another
		// pool's label is on it: a pool of another namespace must never
		// take a scale set, its runners or its demand from the pool that
		// serves it.
		if other := otherPoolLabel(set, runnerstate.PoolRunnerLabel(pool)); other != "" {
			return &scaleSetTakenError{name: set.Name, id: set.ID, label: other}
		}
		want.Known = set.ID
		if set, _, err = scaleset.Ensure(ctx, c, want); err != nil {
			return err
		}
		created = false
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaleSetAdopted", "ScaleSet",
			"Scale set %q (ID %d) was already registered; the pool serves it and leaves it in place when deleted", set.Name, set.ID)
	case scaleset.Created:
		created = true
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaleSetCreated", "ScaleSet", "Registered scale set %q (ID %d)", set.Name, set.ID)
	case scaleset.Updated:
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaleSetUpdated", "ScaleSet", "Brought scale set %q (ID %d) in step with the spec", set.Name, set.ID)
	}
	if st == nil || st.ID != int64(set.ID) {
		pool.Status.ScaleSet = &hypervisorv1alpha1.ScaleSetStatus{}
	}
	pool.Status.ScaleSet.ID, pool.Status.ScaleSet.Created = int64(set.ID), created
	mem.scaleSetGen, mem.scaleSetAt = pool.Generation, s.now
	return nil
}

// listen keeps the pool's listener on its scale set, with the capacity the
// pool has left (maxReplicas less its busy runners), and reads the demand
// it last heard.
func (r *Reconciler) listen(_ context.Context, s *scope) (skeleton.Result, error) {
	pool := s.pool
	if !scaleSetMode(pool) {
		return skeleton.Continue(), nil
	}
	if r.Listeners == nil {
		s.listenErr = errors.New("this operator runs no scale-set listeners")
		return skeleton.Continue(), nil
	}
	capacity := max(0, int(pool.Spec.MaxReplicas)-len(s.obs.busy))
	if err := r.Listeners.Ensure(s.key, int(pool.Status.ScaleSet.ID), s.scaleSets, capacity); err != nil {
		s.listenErr = err
		return skeleton.Continue(), nil
	}
	v, _ := r.Listeners.Demand(s.key)
	s.listened = &v
	st := pool.Status.ScaleSet
	st.Session = hypervisorv1alpha1.ScaleSetSessionState(v.Session)
	if v.Known {
		st.AssignedJobs = int32(min(v.Assigned, 1<<30)) //nolint:gosec // bounded above
	}
	if !v.LastMessage.IsZero() {
		// To the minute: the time of every poll would be a status write
		// per poll per pool, for nothing the metric does not say better.
		at := metav1.NewTime(v.LastMessage.Truncate(time.Minute))
		if st.LastMessageTime == nil || !st.LastMessageTime.Equal(&at) {
			st.LastMessageTime = &at
		}
	}
	return skeleton.Continue(), nil
}

// scaleSetDemand is what the scale set needs: GitHub's assigned jobs, once
// the session stated them. Before that (a new leader, a session not open
// yet) the pool holds the runners it has: idle ones retired then would be
// machines the jobs GitHub already assigned were about to take.
func scaleSetDemand(s *scope, obs observed) int {
	if s.listened == nil || !s.listened.Known {
		return obs.current()
	}
	return s.listened.Assigned
}

// sessionSummary says why a scale-set pool takes no jobs while its session
// is not held; nil while it is.
func sessionSummary(s *scope) *conditions.Summary {
	if !scaleSetMode(s.pool) {
		return nil
	}
	name := s.pool.Spec.GitHub.ScaleSet.Name
	switch v := s.listened; {
	case s.listenErr != nil:
		return &conditions.Summary{State: conditions.Waiting, Reason: "ScaleSetNotListened",
			Message: fmt.Sprintf("scale set %q: %v; jobs wait until its session is held", name, s.listenErr)}
	case v == nil || v.Session == scaleset.SessionOpen:
		return nil
	case v.Session == scaleset.SessionWaiting:
		return &conditions.Summary{State: conditions.Waiting, Reason: "ScaleSetSessionHeld",
			Message: fmt.Sprintf("another listener holds scale set %q's message session (another installation serving it?); retrying. Stop the other one, or give this pool another spec.github.scaleSet.name", name)}
	case v.Why != nil:
		return &conditions.Summary{State: conditions.Waiting, Reason: "ScaleSetSessionLost",
			Message: fmt.Sprintf("scale set %q's message session was lost, opening it again: %v", name, v.Why)}
	}
	return &conditions.Summary{State: conditions.Progressing, Reason: "ScaleSetSessionOpening",
		Message: fmt.Sprintf("opening scale set %q's message session", name)}
}

// scaleSetJIT is a just-in-time config for one runner of the pool's scale
// set, generated by the scale set (the runner takes only its jobs).
func (r *Reconciler) scaleSetJIT(ctx context.Context, s *scope, name string) (string, error) {
	if s.scaleSets == nil || s.pool.Status.ScaleSet == nil {
		return "", errors.New("the pool's scale set is not registered yet")
	}
	jit, err := s.scaleSets.GenerateJitRunnerConfig(ctx, &ghscaleset.RunnerScaleSetJitRunnerSetting{Name: name}, int(s.pool.Status.ScaleSet.ID))
	if err != nil {
		return "", fmt.Errorf("generating a JIT config for scale set %d: %w", s.pool.Status.ScaleSet.ID, err)
	}
	return jit.EncodedJITConfig, nil
}

// deleteScaleSet, after the deleted pool's runners are deregistered,
// stops its listener (closing the session) and deletes the scale set if
// the pool made it; one it adopted stays.
func (r *Reconciler) deleteScaleSet(ctx context.Context, s *scope) (skeleton.Result, error) {
	pool := s.pool
	if !scaleSetMode(pool) {
		return skeleton.Continue(), nil
	}
	if r.Listeners != nil {
		r.Listeners.Stop(s.key)
	}
	st := pool.Status.ScaleSet
	if s.pastDeadline || s.cleanupLeft > 0 || s.cleanupErr != nil || st == nil || !st.Created || st.ID == 0 {
		return skeleton.Continue(), nil
	}
	c, err := r.GitHub.ScaleSetClient(ctx, pool)
	if err == nil {
		err = c.DeleteRunnerScaleSet(ctx, int(st.ID))
		if scaleset.IsNotFound(err) {
			err = nil
		}
	}
	if err != nil {
		s.cleanupErr = fmt.Errorf("deleting scale set %d: %w", st.ID, err)
		return skeleton.Continue(), nil
	}
	r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "ScaleSetDeleted", "Delete", "Deleted scale set %q (ID %d)", pool.Spec.GitHub.ScaleSet.Name, st.ID)
	st.ID = 0
	return skeleton.Continue(), nil
}

// listenerForgetter stops a pool's listener when the driver forgets the pool.
type listenerForgetter struct{ l *scalesetlistener.Listeners }

func (f listenerForgetter) Forget(key types.NamespacedName) {
	if f.l != nil {
		f.l.Stop(key)
	}
}

// otherPoolLabel is a pool label on set that is not mine, or "".
func otherPoolLabel(set *ghscaleset.RunnerScaleSet, mine string) string {
	for _, l := range set.Labels {
		if strings.HasPrefix(strings.ToLower(l.Name), runnerstate.PoolLabelPrefix) && !strings.EqualFold(l.Name, mine) {
			return l.Name
		}
	}
	return ""
}

// scaleSetTakenError: the scale set of the pool's name is another pool's.
type scaleSetTakenError struct {
	name  string
	id    int
	label string
}

func (e *scaleSetTakenError) Error() string {
	return fmt.Sprintf("scale set %q (ID %d) is served by another RunnerPool (its label %s); give this pool another spec.github.scaleSet.name (a new RunnerPool)", e.name, e.id, e.label)
}
