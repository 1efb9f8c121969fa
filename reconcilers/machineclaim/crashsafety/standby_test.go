package crashsafety_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/manager"
	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/reconcilers/standby"
)

// startCutAfterBind runs an operator process that dies the moment it has
// bound a standby machine to a claim: the bind's write lands, nothing after
// it does. bound is closed then.
func startCutAfterBind(t *testing.T) (p *testenv.Process, bound <-chan struct{}) {
	t.Helper()
	ch := make(chan struct{})
	var cut atomic.Bool
	p, err := testenv.StartProcess(func(cfg *rest.Config) (testenv.Runnable, error) {
		inner := cfg.WrapTransport
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return cutAfterBind{base: inner(rt), cut: &cut, bound: ch}
		}
		return manager.New(cfg, operatorOptions())
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, ch
}

// cutAfterBind fails every request after the first successful write of a
// standby claim's binding.
type cutAfterBind struct {
	base  http.RoundTripper
	cut   *atomic.Bool
	bound chan struct{}
}

func (c cutAfterBind) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("process killed")
	}
	binding := false
	if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/machineclaims/") && !strings.HasSuffix(r.URL.Path, "/status") && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		binding = bytes.Contains(body, []byte(`"`+standby.BoundToAnnotation+`":"`))
	}
	resp, err := c.base.RoundTrip(r)
	if binding && err == nil && resp.StatusCode < 300 && c.cut.CompareAndSwap(false, true) {
		close(c.bound)
	}
	return resp, err
}

func TestStandbyBindSurvivesAKillMidBind(t *testing.T) {
	ns, sim := proxmoxNamespace(t, proxmoxsim.DefaultLatencies(), &hypervisorv1alpha1.StandbySpec{Hot: 2})
	c := testenv.Client()
	ctx := context.Background()

	// One process makes the standby machines, and stops.
	first := startInstance(t)
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		ready := 0
		for _, sb := range standbyClaims(t, ns) {
			if sb.Status.Phase == hypervisorv1alpha1.MachineReady {
				ready++
			}
		}
		return ready == 2, fmt.Sprintf("%d standby claims Ready", ready)
	})
	first.Stop()

	// Each round: a claim arrives, and the process that binds a standby
	// machine to it dies right after the bind, before the claim records it.
	const rounds = 2
	promised := map[string]string{} // claim → the machine bound to it
	for round := range rounds {
		name := fmt.Sprintf("c%d", round)
		if err := c.Create(ctx, &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "ubuntu"}}}); err != nil {
			t.Fatal(err)
		}
		in, bound := startCutAfterBind(t)
		select {
		case <-bound:
		case <-time.After(time.Minute):
			in.Kill()
			t.Fatalf("round %d: no standby machine was bound within a minute", round)
		}
		in.Kill()
		mc := &hypervisorv1alpha1.MachineClaim{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, mc); err != nil {
			t.Fatal(err)
		}
		boundTo := ""
		for _, sb := range standbyClaims(t, ns) {
			if b, ok := standby.BoundTo(&sb); ok && b.Name == name {
				boundTo, promised[name] = sb.Name, sb.Status.MachineName
			}
		}
		if boundTo == "" || mc.Status.MachineName != "" {
			t.Fatalf("round %d: the kill was not mid-bind: a standby claim bound to %s: %q; %s's machine: %q", round, name, boundTo, name, mc.Status.MachineName)
		}
		t.Logf("round %d: killed after binding %s to %s, before %s recorded it", round, boundTo, name, name)
	}

	final := startInstance(t)
	defer final.Kill()
	var claims []hypervisorv1alpha1.MachineClaim
	eventually.That(t, 2*time.Minute, func() (bool, string) {
		var list hypervisorv1alpha1.MachineClaimList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		claims = list.Items
		ready, standbyReady, bound := 0, 0, 0
		for _, mc := range list.Items {
			if _, ok := standby.BoundTo(&mc); ok {
				bound++
			}
			switch {
			case mc.Status.Phase != hypervisorv1alpha1.MachineReady:
			case standby.IsStandby(&mc):
				standbyReady++
			case mc.Status.BoundFrom == nil:
				ready++
			}
		}
		return ready == rounds && standbyReady == 2 && bound == 0 && len(list.Items) == rounds+2,
			fmt.Sprintf("%d of %d claims Ready and handed over, %d standby Ready, %d bound, %d claims in all", ready, rounds, standbyReady, bound, len(list.Items))
	})

	// Every claim, standby or not, has exactly one VM, and every VM one owner.
	perOwner := map[string]int{}
	for _, vm := range sim.VMs() {
		if vm.Template {
			continue
		}
		var owners []string
		for _, tag := range vm.Tags {
			if o, ok := strings.CutPrefix(tag, "hf-owner-"); ok {
				owners = append(owners, o)
			}
		}
		if len(owners) != 1 {
			t.Errorf("VM %d (%s) has owners %v; want exactly one", vm.VMID, vm.Name, owners)
			continue
		}
		perOwner[owners[0]]++
	}
	for _, mc := range claims {
		if want, ok := promised[mc.Name]; ok && mc.Status.MachineName != want {
			t.Errorf("claim %s has machine %s; the one bound to it before the kill was %s", mc.Name, mc.Status.MachineName, want)
		}
		if n := perOwner[string(mc.UID)]; n != 1 {
			t.Errorf("claim %s owns %d VMs, want exactly 1", mc.Name, n)
		}
	}
	if len(perOwner) != len(claims) {
		t.Errorf("%d owners of VMs for %d claims: a VM is left to no claim", len(perOwner), len(claims))
	}
}

func standbyClaims(t *testing.T, ns string) []hypervisorv1alpha1.MachineClaim {
	t.Helper()
	var list hypervisorv1alpha1.MachineClaimList
	if err := testenv.Client().List(context.Background(), &list, client.InNamespace(ns), client.HasLabels{standby.TemplateLabel}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}
