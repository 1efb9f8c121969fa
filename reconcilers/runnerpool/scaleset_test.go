package runnerpool_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/github/scaleset"
)

// scaleSetPool makes a pool in scale-set mode whose scale set has the
// pool's name: jobs select it with runs-on: <name>.
func scaleSetPool(name string) func(*hypervisorv1alpha1.RunnerPool) {
	return func(p *hypervisorv1alpha1.RunnerPool) {
		p.Spec.GitHub.ScaleSet = &hypervisorv1alpha1.ScaleSetSpec{Name: name}
		p.Spec.Labels = nil
	}
}

// sessionOpen waits until the pool's scale set is registered and its
// listener holds the session, and returns the pool.
func (l *lab) sessionOpen(name string) *hypervisorv1alpha1.RunnerPool {
	l.t.Helper()
	var p *hypervisorv1alpha1.RunnerPool
	eventually.That(l.t, time.Minute, func() (bool, string) {
		p = l.get(name)
		st := p.Status.ScaleSet
		return st != nil && st.ID != 0 && st.Session == hypervisorv1alpha1.ScaleSetSessionOpen && readyReason(p) == "Ready",
			fmt.Sprintf("scale set %+v; %s", st, describe(p))
	})
	return p
}

// scaleSetOf is githubsim's scale set named name, if registered.
func scaleSetOf(name string) (githubsim.ScaleSet, bool) {
	for _, ss := range gh.ScaleSets() {
		if strings.EqualFold(ss.Name, name) {
			return ss, true
		}
	}
	return githubsim.ScaleSet{}, false
}

func queueFor(t *testing.T, label string, n int, d time.Duration) []int64 {
	t.Helper()
	ids := make([]int64, 0, n)
	for range n {
		id, err := gh.QueueJobSpec(githubsim.JobSpec{Repo: repo, Labels: []string{label}, Duration: d})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func allDone(ids []int64) (bool, string) {
	done := 0
	for _, id := range ids {
		if ok, _ := jobDone(id); ok {
			done++
		}
	}
	return done == len(ids), fmt.Sprintf("%d of %d jobs done", done, len(ids))
}

// A scale-set pool registers its scale set, holds its session, scales to
// the jobs GitHub assigns it and serves each on a runner registered with
// the scale set's JIT config; it records no RunnerJob (no webhook, no
// poll), and deleting it deletes the scale set it made and every runner.
func TestScaleSetPoolServesItsJobsEndToEnd(t *testing.T) {
	l := newLab(t)
	l.pool("ss-e2e", scaleSetPool("ss-e2e"))
	p := l.sessionOpen("ss-e2e")
	if !p.Status.ScaleSet.Created {
		t.Errorf("a scale set the pool registered is not marked created: %+v", p.Status.ScaleSet)
	}
	ss, ok := scaleSetOf("ss-e2e")
	if !ok || ss.ID != int(p.Status.ScaleSet.ID) || ss.Session == "" {
		t.Fatalf("githubsim's scale set %+v (found %v), pool's %+v", ss, ok, p.Status.ScaleSet)
	}
	ids := queueFor(t, "ss-e2e", 4, 2*time.Second)
	peak := int32(0)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		p := l.get("ss-e2e")
		peak = max(peak, p.Status.DesiredReplicas)
		done, msg := allDone(ids)
		return done, msg + "; " + describe(p)
	})
	if peak < 2 {
		t.Errorf("the pool's desired count peaked at %d for 4 assigned jobs", peak)
	}
	for _, id := range ids {
		j, _ := gh.Job(id)
		if !strings.HasPrefix(j.RunnerName, "ss-e2e-") || j.Conclusion != "success" {
			t.Errorf("job %d ran on %q with conclusion %q", id, j.RunnerName, j.Conclusion)
		}
	}
	var records hypervisorv1alpha1.RunnerJobList
	if err := l.c.List(rootCtx, &records, client.InNamespace(l.ns)); err != nil {
		t.Fatal(err)
	}
	if len(records.Items) != 0 {
		t.Errorf("a scale-set pool recorded %d RunnerJobs: webhook or poll demand reached it", len(records.Items))
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		p := l.get("ss-e2e")
		return len(l.claims()) == 0 && l.vms() == 0 && registered("ss-e2e") == 0 && p.Status.ScaleSet.AssignedJobs == 0,
			fmt.Sprintf("claims %s, %d VMs, %d registered; %s", l.describeClaims(), l.vms(), registered("ss-e2e"), describe(p))
	})
	if err := l.c.Delete(rootCtx, l.get("ss-e2e")); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		_, left := scaleSetOf("ss-e2e")
		return !left, "the pool's scale set is still registered after the pool's deletion"
	})
}

// A scale set of the pool's name that the pool did not register is
// adopted: served, but left registered when the pool is deleted.
func TestAdoptedScaleSetOutlivesThePool(t *testing.T) {
	l := newLab(t)
	owner, name, _ := strings.Cut(repo, "/")
	c, err := scaleset.NewClient(scaleset.ClientConfig{Credentials: github.Config{Token: gh.PAT()},
		ConfigURL: scaleset.ConfigURL(gh.URL()+"/", owner, name, ""), Version: "test", RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	made, out, err := scaleset.Ensure(rootCtx, c, scaleset.Want{Name: "ss-adopt"})
	if err != nil || out != scaleset.Created {
		t.Fatalf("registering the scale set beforehand: %s, %v", out, err)
	}
	t.Cleanup(func() { _ = c.DeleteRunnerScaleSet(rootCtx, made.ID) })
	l.pool("ss-adopt", scaleSetPool("ss-adopt"))
	p := l.sessionOpen("ss-adopt")
	if p.Status.ScaleSet.Created || p.Status.ScaleSet.ID != int64(made.ID) {
		t.Fatalf("status %+v; want the scale set %d adopted, not created", p.Status.ScaleSet, made.ID)
	}
	if evs := l.events("ss-adopt"); !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "ScaleSetAdopted") }) {
		t.Errorf("no ScaleSetAdopted event: %v", evs)
	}
	ids := queueFor(t, "ss-adopt", 1, 500*time.Millisecond)
	eventually.That(t, time.Minute, func() (bool, string) { return allDone(ids) })
	if err := l.c.Delete(rootCtx, l.get("ss-adopt")); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, time.Minute, func() (bool, string) {
		err := l.c.Get(rootCtx, client.ObjectKey{Namespace: l.ns, Name: "ss-adopt"}, &hypervisorv1alpha1.RunnerPool{})
		return err != nil, "the pool is still there"
	})
	if ss, ok := scaleSetOf("ss-adopt"); !ok || ss.ID != made.ID {
		t.Errorf("the adopted scale set was deleted with the pool")
	}
}

// describeClaims says where each of the lab's runner claims is.
func (l *lab) describeClaims() string {
	var out []string
	for _, c := range l.claims() {
		var notes []string
		for k, v := range c.Annotations {
			if strings.Contains(k, "notes.") || strings.Contains(k, "runner") {
				notes = append(notes, k+"="+v)
			}
		}
		slices.Sort(notes)
		out = append(out, fmt.Sprintf("%s(%s, deleting %v, %v)", c.Name, c.Status.Phase, c.DeletionTimestamp != nil, notes))
	}
	return fmt.Sprint(out)
}

// A pool of another namespace that names a scale set another pool serves
// never takes it: it stalls saying whose it is, and the serving pool keeps
// its scale set, its labels and its session.
func TestAnotherTenantsScaleSetIsNotTaken(t *testing.T) {
	a := newLab(t)
	a.pool("ss-tenant", scaleSetPool("ss-tenant"))
	pa := a.sessionOpen("ss-tenant")
	before, _ := scaleSetOf("ss-tenant")
	b := newLab(t)
	b.pool("intruder", scaleSetPool("ss-tenant"))
	eventually.That(t, time.Minute, func() (bool, string) {
		p := b.get("intruder")
		return readyReason(p) == "ScaleSetTaken", describe(p)
	})
	after, _ := scaleSetOf("ss-tenant")
	if fmt.Sprint(after.Labels) != fmt.Sprint(before.Labels) || after.ID != int(pa.Status.ScaleSet.ID) {
		t.Errorf("the scale set changed: %+v, was %+v", after, before)
	}
	if p := b.get("intruder"); p.Status.ScaleSet != nil {
		t.Errorf("the intruding pool recorded the scale set: %+v", p.Status.ScaleSet)
	}
	if st := a.get("ss-tenant").Status.ScaleSet; st.Session != hypervisorv1alpha1.ScaleSetSessionOpen {
		t.Errorf("the serving pool's session is %s", st.Session)
	}
}

// A scale-set pool on Proxmox: its runners are cloned VMs booting with the
// scale set's JIT configs from their NoCloud ISOs; after the jobs, the
// runners, VMs, registrations and ISOs are gone.
func TestProxmoxScaleSetPoolServesItsJobs(t *testing.T) {
	l := newProxmoxLab(t)
	l.pool("ss-pve", scaleSetPool("ss-pve"))
	l.sessionOpen("ss-pve")
	ids := queueFor(t, "ss-pve", 2, time.Second)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		done, msg := allDone(ids)
		return done, msg + "; " + describe(l.get("ss-pve"))
	})
	for _, id := range ids {
		if j, _ := gh.Job(id); !strings.HasPrefix(j.RunnerName, "ss-pve-") || j.Conclusion != "success" {
			t.Errorf("job %d ran on %q with conclusion %q", id, j.RunnerName, j.Conclusion)
		}
	}
	l.gone("ss-pve")
}
