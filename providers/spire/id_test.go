package spire_test

import (
	"errors"
	"testing"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

func machine() spire.MachineID {
	return spire.MachineID{TrustDomain: "example.org", Installation: "prod", Kind: "MachineClaim", Namespace: "ci", Name: "runner-1", UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"}
}

func TestMachineIDString(t *testing.T) {
	m := machine()
	want := "spiffe://example.org/hyperfleet/prod/MachineClaim/ci/runner-1/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	if got := m.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got := m.Path(); got != want[len("spiffe://example.org"):] {
		t.Fatalf("Path() = %q", got)
	}
	w, err := m.Workload("runner")
	if err != nil || w != want+"/runner" {
		t.Fatalf("Workload(runner) = %q, %v", w, err)
	}
	if p := spire.InstallationPrefix("example.org", "prod"); p != "spiffe://example.org/hyperfleet/prod/" || len(want) <= len(p) || want[:len(p)] != p {
		t.Fatalf("InstallationPrefix = %q, not a prefix of %q", p, want)
	}
}

func TestMachineIDValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*spire.MachineID)
	}{
		{"empty trust domain", func(m *spire.MachineID) { m.TrustDomain = "" }},
		{"uppercase trust domain", func(m *spire.MachineID) { m.TrustDomain = "Example.org" }},
		{"trust domain with port", func(m *spire.MachineID) { m.TrustDomain = "example.org:8081" }},
		{"empty installation", func(m *spire.MachineID) { m.Installation = "" }},
		{"slash in installation", func(m *spire.MachineID) { m.Installation = "a/b" }},
		{"dot-dot namespace", func(m *spire.MachineID) { m.Namespace = ".." }},
		{"dot name", func(m *spire.MachineID) { m.Name = "." }},
		{"slash in name shifts the layout", func(m *spire.MachineID) { m.Name = "x/y" }},
		{"percent-encoding in uid", func(m *spire.MachineID) { m.UID = "a%2Fb" }},
		{"space in kind", func(m *spire.MachineID) { m.Kind = "Machine Claim" }},
		{"empty uid", func(m *spire.MachineID) { m.UID = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := machine()
			tc.change(&m)
			if err := m.Validate(); !errors.Is(err, spire.ErrInvalidID) {
				t.Fatalf("Validate() = %v, want ErrInvalidID", err)
			}
			if _, err := m.Workload("w"); !errors.Is(err, spire.ErrInvalidID) {
				t.Fatalf("Workload() = %v, want ErrInvalidID", err)
			}
		})
	}
	if err := machine().Validate(); err != nil {
		t.Fatalf("valid machine: %v", err)
	}
	if _, err := machine().Workload("a/b"); !errors.Is(err, spire.ErrInvalidID) {
		t.Fatalf("Workload(a/b) = %v, want ErrInvalidID", err)
	}
}

func TestParseID(t *testing.T) {
	m := machine()
	for _, tc := range []struct {
		id       string
		workload string
		ok       bool
	}{
		{m.String(), "", true},
		{m.String() + "/runner", "runner", true},
		{m.String() + "/a/b", "", false},
		{m.String() + "/..", "", false},
		{m.String() + "/", "", false},
		{"spiffe://example.org/hyperfleet/prod/MachineClaim/ci/runner-1", "", false},
		{"spiffe://example.org/other/prod/MachineClaim/ci/runner-1/uid", "", false},
		{"spiffe://example.org/spire/agent/join_token/abc", "", false},
		{"https://example.org/hyperfleet/prod/MachineClaim/ci/runner-1/uid", "", false},
		{"spiffe://example.org/hyperfleet/prod/MachineClaim/ci//uid", "", false},
		{"spiffe://EXAMPLE.org/hyperfleet/prod/MachineClaim/ci/runner-1/uid", "", false},
	} {
		got, w, err := spire.ParseID(tc.id)
		if !tc.ok {
			if !errors.Is(err, spire.ErrInvalidID) {
				t.Errorf("ParseID(%q) = %v, %v, want ErrInvalidID", tc.id, got, err)
			}
			continue
		}
		if err != nil || got != m || w != tc.workload {
			t.Errorf("ParseID(%q) = %+v, %q, %v; want %+v, %q", tc.id, got, w, err, m, tc.workload)
		}
	}
}
