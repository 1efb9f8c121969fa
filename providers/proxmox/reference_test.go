package proxmox

import (
	"errors"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

// The reference is deterministic (a retry after a crash proposes the same),
// in the VMID range, and the next one differs and is deterministic too.
func TestReferenceAndNextReference(t *testing.T) {
	p := &Provider{}
	owner := providers.Owner{UID: "0f3a9c2e-1111-2222-3333-444455556666", Namespace: "ci", Name: "runner-1"}
	ref := p.Reference(owner)
	if ref.Name != "hf-ci-runner-1" || ref.VMID < vmidMin || ref.VMID >= vmidMin+vmidSpan || ref != p.Reference(owner) {
		t.Fatalf("reference %+v", ref)
	}
	next, ok := p.NextReference(owner, ref)
	if !ok || next.Name != ref.Name || next.VMID == ref.VMID || next.VMID < vmidMin || next.VMID >= vmidMin+vmidSpan {
		t.Fatalf("next reference %+v (%v) after %+v", next, ok, ref)
	}
	if again, _ := p.NextReference(owner, ref); again != next {
		t.Errorf("next reference not deterministic: %+v then %+v", next, again)
	}
	other := p.Reference(providers.Owner{UID: "99999999-1111-2222-3333-444455556666", Namespace: "ci", Name: "runner-2"})
	if other.VMID == ref.VMID {
		t.Errorf("two owners drew the same VMID %d", ref.VMID)
	}
}

// A full clone queue is a typed, queued transient error with its hint.
func TestQueuedIsTyped(t *testing.T) {
	err := providers.Queued("CloneQueued", 3*time.Second, errors.New("node pve1 is at its concurrent-clone limit"))
	if !errors.Is(err, providers.ErrQueued) || providers.RetryAfter(err) != 3*time.Second {
		t.Errorf("%v: want ErrQueued with a 3s hint", err)
	}
	if errors.Is(providers.Transient("HypervisorError", 0, errors.New("503")), providers.ErrQueued) {
		t.Error("a plain transient error matched ErrQueued")
	}
}
