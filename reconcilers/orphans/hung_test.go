package orphans_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
	"github.com/hyperfleet/hyperfleet/reconcilers/hypervisors"
	"github.com/hyperfleet/hyperfleet/reconcilers/orphans"
)

// hangingList is a provider whose listing, once hang is set, never
// answers: what a hypervisor that accepts and holds the connection gives.
type hangingList struct {
	providers.Hypervisor
	hang *atomic.Bool
}

func (h hangingList) List(ctx context.Context) ([]providers.Machine, error) {
	if h.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Hypervisor.List(ctx)
}

// A cluster whose hypervisor stops answering delays neither another
// cluster's sweep nor the end of the sweep past its own deadline: the other
// cluster's orphan is deleted while the hung listing is still held, and the
// sweep returns, naming the hung cluster.
func TestHungClusterDelaysOnlyItsOwnSweep(t *testing.T) {
	l := hypervisorlab.Proxmox(t)
	l.WaitReason(&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}, "Connected", 30*time.Second)
	hung := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "hung"}}
	pve := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "pve"}}
	if err := l.Get(pve); err != nil {
		t.Fatal(err)
	}
	hung.Spec = pve.Spec
	l.Create(hung)

	// A sweeper of its own, whose registry makes "hung"'s listings hang
	// once told to; the suite's sweeper never deletes without its clock
	// stepped, which this test does not do.
	var hang atomic.Bool
	proxmox := hypervisors.Proxmox(hypervisorlab.Installation)
	registry := &hypervisors.Registry{
		Credentials: &credentials.Reader{Reader: testenv.Client(), TTL: hypervisorlab.SecretTTL}, APIReader: testenv.Client(),
		Factories: map[hypervisorv1alpha1.ProviderType]hypervisors.Factory{
			hypervisorv1alpha1.ProviderProxmox: func(c *hypervisorv1alpha1.HypervisorCluster, creds hypervisors.Credentials) (providers.Hypervisor, error) {
				p, err := proxmox(c, creds)
				if err != nil || c.Namespace != l.NS || c.Name != "hung" {
					return p, err
				}
				return hangingList{Hypervisor: p, hang: &hang}, nil
			},
		},
	}
	sweeper := &orphans.Sweeper{
		Client: testenv.Client(), Hypervisors: registry, Recorder: &events.FakeRecorder{}, Clock: clock.RealClock{}, Grace: time.Nanosecond,
	}

	l.Sim.AddVM("pve1", 4646, "hf-gone-claim", []string{"hyperfleet", "hf-owner-0badc0de-0000-4000-8000-000000000046", ourTag}, false) // stopped: one Delete call destroys it
	// The first sweep sees the orphan on both clusters; the next may delete it.
	if _, err := sweeper.Sweep(context.Background()); err != nil {
		t.Logf("first sweep: %v", err) // other tests' clusters may be gone
	}
	hang.Store(true)
	done := make(chan error, 1)
	go func() { _, err := sweeper.Sweep(context.Background()); done <- err }()

	eventually.That(t, 20*time.Second, func() (bool, string) {
		_, there := l.Sim.VM(4646)
		return !there, "the orphan on the cluster that answers is not deleted while the other cluster's listing hangs"
	})
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the sweep ended without saying the hung cluster ran out of time: %v", err)
		}
	case <-time.After(orphans.DefaultClusterTimeout + 30*time.Second):
		t.Fatal("the sweep waits on the hung cluster past its deadline")
	}
}
