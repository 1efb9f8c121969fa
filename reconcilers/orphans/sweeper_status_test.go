package orphans

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
)

// The sweeper's decision over one machine, sweep after sweep: which are
// orphans, and which are deleted now, given the claims, the grace and the
// ownership marks.
func TestDecision(t *testing.T) {
	const grace = 10 * time.Minute
	start := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	live := map[string]bool{"live-claim": true}
	const us = "prod-1" // providers list only this installation's machines and unmarked ones
	tests := []struct {
		name    string
		owner   string
		inst    string
		seen    time.Duration // how long ago the machine was first seen as an orphan
		verdict verdict
		delete  bool
	}{
		{name: "no ownership marks: not ours, never touched", owner: "", seen: time.Hour, verdict: keep},
		{name: "its claim exists", owner: "live-claim", inst: us, seen: time.Hour, verdict: keep},
		{name: "made before installations, its claim is ours: marked", owner: "live-claim", seen: time.Hour, verdict: adopt},
		{name: "made before installations, its claim is not ours: reported, never deleted", owner: "gone-claim", seen: 3 * grace, verdict: unmarked},
		{name: "an orphan seen for the first time", owner: "gone-claim", inst: us, verdict: orphan},
		{name: "an orphan within its grace", owner: "gone-claim", inst: us, seen: grace - time.Second, verdict: orphan},
		{name: "an orphan at the end of its grace", owner: "gone-claim", inst: us, seen: grace, verdict: orphan, delete: true},
		{name: "an orphan past its grace", owner: "gone-claim", inst: us, seen: 3 * grace, verdict: orphan, delete: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := providers.Machine{Owner: providers.Owner{UID: tt.owner}, Installation: tt.inst, ProviderID: "proxmox://pve1/4242"}
			v := judge(m, live)
			if v != tt.verdict {
				t.Fatalf("verdict = %v, want %v", v, tt.verdict)
			}
			if v != orphan {
				return
			}
			now := start.Add(tt.seen)
			if del := pastGrace(start, now, grace); del != tt.delete {
				t.Errorf("delete = %v, want %v", del, tt.delete)
			}
		})
	}
}

// A sweeper remembers when it first saw each orphan, and forgets the ones a
// sweep no longer sees, so one seen again starts its grace anew.
func TestFirstSeenIsRememberedAndForgotten(t *testing.T) {
	s := &Sweeper{}
	t0 := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	if got := s.remember("a", t0); !got.Equal(t0) {
		t.Fatalf("first sight at %v, want %v", got, t0)
	}
	if got := s.remember("a", t0.Add(time.Minute)); !got.Equal(t0) {
		t.Fatalf("second sight reports %v, want the first, %v", got, t0)
	}
	s.forgetExcept(map[string]bool{})
	if got := s.remember("a", t0.Add(time.Hour)); !got.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after being forgotten, first sight at %v", got)
	}
}

func TestFinishedDeletions(t *testing.T) {
	cluster := func(name string) *hypervisorv1alpha1.HypervisorCluster {
		return &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	deleting := map[string]deletion{
		"ns/pve/proxmox://pve1/1": {cluster: cluster("pve")},
		"ns/pve/proxmox://pve1/2": {cluster: cluster("pve")},
		"ns/other/proxmox://x/3":  {cluster: cluster("other")},
	}
	tests := []struct {
		name   string
		seen   map[string]bool
		listed map[string]bool
		want   []string
	}{
		{name: "still listed: under way", seen: map[string]bool{"ns/pve/proxmox://pve1/1": true, "ns/pve/proxmox://pve1/2": true},
			listed: map[string]bool{"ns/pve": true}},
		{name: "gone from a listing: done", seen: map[string]bool{"ns/pve/proxmox://pve1/2": true},
			listed: map[string]bool{"ns/pve": true}, want: []string{"ns/pve/proxmox://pve1/1"}},
		{name: "a cluster that could not be listed says nothing", seen: map[string]bool{},
			listed: map[string]bool{}},
		{name: "every cluster listed, nothing left", seen: map[string]bool{},
			listed: map[string]bool{"ns/pve": true, "ns/other": true},
			want:   []string{"ns/other/proxmox://x/3", "ns/pve/proxmox://pve1/1", "ns/pve/proxmox://pve1/2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := finished(deleting, tt.seen, tt.listed); !slices.Equal(got, tt.want) {
				t.Errorf("finished = %v, want %v", got, tt.want)
			}
		})
	}
}
