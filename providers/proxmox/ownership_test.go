package proxmox

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/internal/sim/proxmoxsim"
	"github.com/hyperfleet/hyperfleet/providers"
)

// Ownership is read from the set of marks a VM carries: whatever order
// Proxmox stores its tags in (sorted, or as written) and whatever their
// case, the answer is the same.
func TestOwnershipIgnoresTagOrderAndCase(t *testing.T) {
	const us = "inst-a"
	owner := providers.Owner{UID: "0f3a9c2e-1111-2222-3333-444455556666"}
	tags := []string{"hyperfleet", "HF-OWNER-0F3A9C2E-1111-2222-3333-444455556666", "Hf-Inst-INST-A", "team-x"}
	for i := range len(tags) {
		rotated := append(slices.Clone(tags[i:]), tags[:i]...)
		for _, joined := range []string{strings.Join(rotated, ";"), strings.Join(rotated, ",")} {
			got := splitTags(joined)
			if !ownedBy(got, "", owner, us) || foreign(got, "", us) {
				t.Errorf("tags %q: ownedBy %v, foreign %v; want ours", joined, ownedBy(got, "", owner, us), foreign(got, "", us))
			}
		}
	}
}

// A VM carrying two different owner marks is nobody's: two owner tags, a
// tag and a description line that disagree, or two installations. It is
// never adopted, never listed, never powered off or deleted, whichever
// mark comes first.
func TestConflictingMarksAreRefused(t *testing.T) {
	const us = "inst-a"
	owner := providers.Owner{UID: "0f3a9c2e-1111-2222-3333-444455556666", Namespace: "ci", Name: "r"}
	other := "99999999-1111-2222-3333-444455556666"
	cases := []struct {
		name string
		tags []string
		desc string
	}{
		{"two owner tags, ours first", []string{managedTag, ownerTag(owner.UID), ownerTag(other), installationTag(us)}, ""},
		{"two owner tags, ours last", []string{managedTag, ownerTag(other), ownerTag(owner.UID), installationTag(us)}, ""},
		{"tag ours, description another's", []string{managedTag, ownerTag(owner.UID), installationTag(us)}, description(providers.Owner{UID: other}, us)},
		{"two description lines", nil, description(owner, us) + ownerDescription + other + "\n"},
		{"two installations", []string{managedTag, ownerTag(owner.UID), installationTag(us), installationTag("inst-b")}, ""},
		{"installation tag and line disagree", []string{managedTag, ownerTag(owner.UID), installationTag(us)}, description(owner, "inst-b")},
	}
	for _, tc := range cases {
		if ownedBy(tc.tags, tc.desc, owner, us) {
			t.Errorf("%s: ownedBy = true", tc.name)
		}
		if !foreign(tc.tags, tc.desc, us) {
			t.Errorf("%s: foreign = false, want true (never listed nor touched)", tc.name)
		}
	}

	// On a cluster: Create does not adopt it, Delete and PowerOff refuse it
	// with the typed error, List leaves it out, and it is left running.
	sim, fresh := cloneSim(t, proxmoxsim.DefaultLatencies(), nil)
	p := fresh()
	ctx := context.Background()
	spec := cloneSpec(owner.UID, 100400)
	sim.AddVM("pve1", spec.Ref.VMID, spec.Ref.Name, []string{ownerTag(owner.UID), ownerTag(other), managedTag, installationTag("inst-a")}, true)
	_, err := p.Create(ctx, spec)
	var conflict *ConflictingMarksError
	if !errors.Is(err, providers.ErrNameTaken) || !errors.As(err, &conflict) || len(conflict.Owners) != 2 {
		t.Fatalf("Create on a VM with two owner tags = %v; want ErrNameTaken with ConflictingMarksError", err)
	}
	ref := providers.MachineRef{VMID: spec.Ref.VMID, Node: "pve1"}
	if err := p.Delete(ctx, ref, spec.Owner); !errors.Is(err, providers.ErrNotOwned) || !errors.As(err, &conflict) {
		t.Errorf("Delete = %v; want ErrNotOwned with ConflictingMarksError", err)
	}
	if err := p.PowerOff(ctx, ref, spec.Owner); !errors.Is(err, providers.ErrNotOwned) {
		t.Errorf("PowerOff = %v; want ErrNotOwned", err)
	}
	if ms, err := p.List(ctx); err != nil || len(ms) != 0 {
		t.Errorf("List = %+v, %v; want nothing", ms, err)
	}
	if vm, ok := sim.VM(spec.Ref.VMID); !ok || vm.Status != "running" {
		t.Fatalf("the VM was touched: %+v", vm)
	}
}

// Tags a tenant writes (a HypervisorCluster's or a template's) may not
// carry the prefixes of HyperFleet's own marks: the provider refuses them,
// naming the field, before anything is made.
func TestReservedTagsAreRefused(t *testing.T) {
	for _, tag := range []string{"hyperfleet", "HyperFleet-x", "hf-owner-0f3a9c2e", "hf-inst-prod", "hf-started", "HF-STARTED"} {
		_, err := New(Config{Endpoint: "https://pve:8006/api2/json", TokenID: "root@pam!hf", TokenSecret: "s", Installation: "inst-a", Tags: []string{"ok", tag}})
		pe, ok := providers.IsPermanent(err)
		if !ok || pe.Reason != "ReservedTag" || !strings.Contains(pe.Message, "HypervisorCluster") || !strings.Contains(pe.Message, tag) {
			t.Errorf("cluster tag %q: New = %v; want Permanent ReservedTag naming the HypervisorCluster's field", tag, err)
		}
	}
	sim, fresh := cloneSim(t, proxmoxsim.DefaultLatencies(), nil)
	p := fresh()
	spec := cloneSpec("0f3a9c2e-1111-2222-3333-444455556667", 100410)
	spec.Tags = []string{"team-a", "hf-owner-99999999-1111-2222-3333-444455556666"}
	_, err := p.Create(context.Background(), spec)
	pe, ok := providers.IsPermanent(err)
	if !ok || pe.Reason != "ReservedTag" || !strings.Contains(pe.Message, "HypervisorMachineTemplate") {
		t.Fatalf("Create with a reserved template tag = %v; want Permanent ReservedTag naming the template's field", err)
	}
	if _, err := p.CheckTemplate(context.Background(), spec); err == nil {
		t.Error("CheckTemplate accepts a reserved template tag")
	}
	if n := cloneTasks(sim); n != 0 {
		t.Fatalf("%d clones started for a refused spec", n)
	}
}

// A template that itself carries HyperFleet's marks (someone tagged it, or
// made it from a managed VM) does not make its clones look foreign: the
// clone's owner is decided from what the operator wrote, the marks it
// inherited are dropped when it is configured, and the claim gets one VM.
func TestTemplateWithReservedTagsClonesOnce(t *testing.T) {
	lat := proxmoxsim.DefaultLatencies()
	sim := proxmoxsim.New(proxmoxsim.Options{Latencies: lat})
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	const foreignUID = "00000000-aaaa-4000-8000-000000000000"
	sim.AddTemplate("pve1", 9000, "ubuntu-2404", map[string]string{"tags": "hf-owner-" + foreignUID + ";hf-inst-inst-a;hyperfleet;hf-started;golden"})
	id, secret := sim.APIToken()
	p, err := New(Config{Endpoint: sim.URL(), TokenID: id, TokenSecret: secret, CAPEM: sim.CACertPEM(), Installation: "inst-a"})
	if err != nil {
		t.Fatal(err)
	}
	spec := cloneSpec("0f3a9c2e-1111-2222-3333-444455556668", 100420)
	ctx := context.Background()
	until(t, "the clone to be made and started", func() bool {
		m, err := p.Create(ctx, spec)
		if err != nil && !errors.Is(err, providers.ErrQueued) {
			t.Fatalf("Create = %v", err)
		}
		return m.Provisioned && m.State == providers.PowerRunning
	})
	vm, _ := sim.VM(spec.Ref.VMID)
	var owners []string
	for _, tag := range vm.Tags {
		if strings.HasPrefix(tag, ownerTagPrefix) {
			owners = append(owners, tag)
		}
	}
	if !slices.Equal(owners, []string{ownerTag(spec.Owner.UID)}) || !slices.Contains(vm.Tags, "golden") {
		t.Fatalf("clone tags = %q; want only our owner tag, the template's own tags kept", vm.Tags)
	}
	if n := cloneTasks(sim); n != 1 {
		t.Fatalf("clone tasks = %d, want 1", n)
	}
	ms, err := p.List(ctx)
	if err != nil || len(ms) != 1 || ms[0].Owner.UID != spec.Owner.UID {
		t.Fatalf("List = %+v, %v; want the clone, ours", ms, err)
	}
}
