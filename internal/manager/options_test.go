//go:build !hourglass

package manager

import (
	"flag"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

func parsed(t *testing.T, args ...string) Options {
	t.Helper()
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestDefaultsAreProductionSafe(t *testing.T) {
	t.Setenv("POD_NAME", "hyperfleet-7d9f-abcde")
	t.Setenv("POD_NAMESPACE", "hyperfleet-system")
	o := parsed(t)
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if !o.LeaderElect || !o.MetricsSecure {
		t.Errorf("leader election and secure metrics must be on by default: %+v", o)
	}
	if o.Identity != "hyperfleet-7d9f-abcde" {
		t.Errorf("identity = %q, want POD_NAME", o.Identity)
	}
	if o.LeaderElectionNamespace != "hyperfleet-system" || o.OperatorNamespace != "hyperfleet-system" {
		t.Errorf("namespaces = %q/%q, want POD_NAMESPACE", o.LeaderElectionNamespace, o.OperatorNamespace)
	}
}

func TestIdentityFallsBackToHostname(t *testing.T) {
	t.Setenv("POD_NAME", "")
	o := parsed(t)
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if o.Identity != host {
		t.Errorf("identity = %q, want hostname %q", o.Identity, host)
	}
}

func TestNamespacesFlag(t *testing.T) {
	o := parsed(t, "--namespaces", " team-a, ,team-b ")
	if want := []string{"team-a", "team-b"}; !reflect.DeepEqual(o.Namespaces, want) {
		t.Errorf("namespaces = %q, want %q", o.Namespaces, want)
	}
}

func TestLeaderElectionTimingsAreChecked(t *testing.T) {
	o := parsed(t, "--leader-election-renew-deadline", "20s")
	o.LeaseDuration = 15 * time.Second
	err := o.Complete()
	if err == nil || !strings.Contains(err.Error(), "retry-period < renew-deadline < lease-duration") {
		t.Fatalf("Complete with renew deadline above lease duration: %v", err)
	}
	o = parsed(t, "--leader-elect=false", "--leader-election-renew-deadline", "20s")
	if err := o.Complete(); err != nil {
		t.Fatalf("timings must not matter with leader election off: %v", err)
	}
}

func TestControllersFlag(t *testing.T) {
	if o := parsed(t); !o.runs(ControllerMachineClaim) || !o.runs(ControllerHourglass) {
		t.Error("by default every reconciler runs")
	}
	o := parsed(t, "--controllers", "machineclaim, hypervisorcluster")
	if !o.runs(ControllerMachineClaim) || !o.runs(ControllerHypervisorCluster) || o.runs(ControllerCyberdesk) || o.runs(ControllerRunnerPool) {
		t.Errorf("--controllers machineclaim,hypervisorcluster runs %v", o.Controllers)
	}
	if o := parsed(t, "--controllers", "*"); !o.runs(ControllerCyberdesk) {
		t.Error("--controllers * runs every reconciler")
	}
	var bad Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bad.BindFlags(fs)
	if err := fs.Parse([]string{"--controllers", "machineclaims"}); err == nil || !strings.Contains(err.Error(), `unknown controller "machineclaims"`) {
		t.Errorf("a misspelt controller gives %v, want an error naming it", err)
	}
	if err := fs.Parse([]string{"--controllers", "cyberdesk"}); err == nil || !strings.Contains(err.Error(), "cyberdesk needs machineclaim") {
		t.Errorf("desks without their claims' reconciler give %v, want an error saying what to add", err)
	}
	bad = Options{Controllers: []string{"performer"}, OperatorNamespace: "x", Identity: "x"}
	if err := bad.Complete(); err == nil {
		t.Error("Complete accepts an unknown controller")
	}
}

// --installation-id becomes a Proxmox tag and a label value: a bad one
// stops the manager at start, naming the flag. Unset, it is resolved from
// the operator's namespace when the manager is built.
func TestInstallationIDFlag(t *testing.T) {
	cases := []struct {
		arg string
		ok  bool
	}{
		{"", true},
		{"prod", true},
		{"0b6c7c2e-5f1d-4d8e-9a55-3f0c1e2d4b6a", true},
		{"Prod", false},
		{"prod_1", false},
		{"-prod", false},
		{strings.Repeat("a", 64), false},
	}
	for _, tc := range cases {
		o := parsed(t, "--installation-id", tc.arg)
		err := o.Complete()
		if (err == nil) != tc.ok {
			t.Errorf("--installation-id=%q: %v, want ok %v", tc.arg, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--installation-id") {
			t.Errorf("the error does not name the flag: %v", err)
		}
	}
	if a, b := namespaceNameID("hyperfleet-system"), namespaceNameID("hyperfleet-dev"); a == b || a != namespaceNameID("hyperfleet-system") {
		t.Errorf("fallback ids %q, %q: want stable and distinct", a, b)
	}
	if err := providers.ValidateInstallation(namespaceNameID("hyperfleet-system")); err != nil {
		t.Errorf("the fallback id is not a valid one: %v", err)
	}
}

// --workers sets worker counts by reconciler name; a misspelt name, a
// missing count or one out of bounds stops the manager at start, naming it.
func TestWorkersFlag(t *testing.T) {
	if o := parsed(t); o.Workers.For(WorkersPerformer) != 0 {
		t.Errorf("by default the performer count is %d, want 0 (the reconciler's own default)", o.Workers.For(WorkersPerformer))
	}
	o := parsed(t, "--workers", "performer=16, machineclaim=12")
	if o.Workers.For(WorkersPerformer) != 16 || o.Workers.For(WorkersMachineClaim) != 12 || o.Workers.For(WorkersCyberdesk) != 0 {
		t.Errorf("--workers performer=16,machineclaim=12 gives %v", o.Workers)
	}
	for arg, want := range map[string]string{
		"performers=4":   `unknown reconciler "performers"`,
		"performer":      `"performer" is not name=count`,
		"performer=0":    "performer=0: the count must be a whole number from 1 to 256",
		"performer=257":  "performer=257: the count must be",
		"performer=many": "performer=many: the count must be",
	} {
		var bad Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		bad.BindFlags(fs)
		if err := fs.Parse([]string{"--workers", arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--workers %s gives %v, want an error containing %q", arg, err, want)
		}
	}
}

// TestAttestationFlags: the ways to reach SPIRE go together or not at all,
// and a mistake is refused at start with the flags to fix.
func TestAttestationFlags(t *testing.T) {
	t.Setenv("POD_NAME", "hyperfleet-0")
	cases := []struct {
		args    []string
		wantErr string
	}{
		{nil, ""},
		{[]string{"--spire-admin-socket=/run/spire/api.sock", "--spire-trust-domain=example.org"}, ""},
		{[]string{"--spire-server-address=spire:8081", "--spire-admin-credentials=spire-admin", "--spire-trust-domain=example.org",
			"--credential-endpoint-url=https://hf.example:9444", "--spire-workload-selector=unix:uid:0", "--spire-workload-selector=unix:gid:0"}, ""},
		{[]string{"--spire-admin-socket=/run/spire/api.sock"}, "--spire-trust-domain"},
		{[]string{"--spire-trust-domain=example.org"}, "--spire-trust-domain"},
		{[]string{"--spire-server-address=spire:8081", "--spire-trust-domain=example.org"}, "--spire-admin-credentials"},
		{[]string{"--spire-admin-socket=/s", "--spire-server-address=spire:8081", "--spire-admin-credentials=c", "--spire-trust-domain=example.org"}, "choose one"},
		{[]string{"--credential-endpoint-url=http://hf.example:9444"}, "https://"},
		{[]string{"--spire-workload-selector=uid0"}, "type:value"},
	}
	for _, c := range cases {
		o := parsed(t, c.args...)
		err := o.Complete()
		if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%v: %v, want an error naming %q", c.args, err, c.wantErr)
		}
	}
	o := parsed(t, "--spire-workload-selector=unix:uid:0", "--spire-workload-selector=unix:gid:0")
	if got := o.Attestation.selectors(); len(got) != 2 {
		t.Errorf("selectors %v, want both", got)
	}
	def := parsed(t)
	if got := def.Attestation.selectors(); len(got) != 1 || got[0] != "unix:uid:0" {
		t.Errorf("default selectors %v, want unix:uid:0", got)
	}
}

// Every controller's reconcile is bounded: --reconcile-timeout, 2 minutes
// by default, reaches controller-runtime's ReconciliationTimeout; and the
// kinds that wait on tenants' hypervisors take --workers counts.
func TestReconcileTimeoutFlag(t *testing.T) {
	def := parsed(t)
	if got := def.controllerConfig().ReconciliationTimeout; got != DefaultReconcileTimeout || got <= 0 {
		t.Errorf("by default every reconcile is bounded by %v, want %v", got, DefaultReconcileTimeout)
	}
	set := parsed(t, "--reconcile-timeout", "45s")
	if got := set.controllerConfig().ReconciliationTimeout; got != 45*time.Second {
		t.Errorf("--reconcile-timeout 45s gives %v", got)
	}
	o := parsed(t, "--workers", "hypervisorcluster=3,hypervisormachinetemplate=5")
	if o.Workers.For(WorkersHypervisorCluster) != 3 || o.Workers.For(WorkersHypervisorMachineTemplate) != 5 {
		t.Errorf("--workers hypervisorcluster=3,hypervisormachinetemplate=5 gives %v", o.Workers)
	}
}

// --cyberdesk-standby: namespace=count pairs, each refused with the pair
// named; a namespace the operator does not watch is refused at start.
func TestCyberdeskStandbyFlag(t *testing.T) {
	o := parsed(t, "--cyberdesk-standby", "team-a=2, team-b=0")
	if o.Cyberdesk.Standby.Hot["team-a"] != 2 || len(o.Cyberdesk.Standby.Hot) != 2 || o.Cyberdesk.Standby.MaxAge != 24*time.Hour {
		t.Errorf("parsed %+v", o.Cyberdesk.Standby)
	}
	for arg, want := range map[string]string{
		"team-a":            "not namespace=count",
		"Team_A=1":          "not a namespace name",
		"team-a=101":        "from 0 to 100",
		"team-a=-1":         "from 0 to 100",
		"team-a=1,team-a=2": "listed twice",
	} {
		var bad Options
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		bad.BindFlags(fs)
		if err := fs.Parse([]string{"--cyberdesk-standby", arg}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--cyberdesk-standby %s gives %v, want %q", arg, err, want)
		}
	}
	t.Setenv("POD_NAME", "x")
	o = parsed(t, "--cyberdesk-standby", "team-a=1", "--namespaces", "team-b", "--operator-namespace", "hyperfleet-system")
	if err := o.Complete(); err == nil || !strings.Contains(err.Error(), "team-a, which is not in --namespaces") {
		t.Errorf("a standby namespace outside --namespaces gives %v", err)
	}
	o = parsed(t, "--cyberdesk-standby-max-age", "1m")
	if err := o.Complete(); err == nil || !strings.Contains(err.Error(), "at least 10m") {
		t.Errorf("a 1m age limit gives %v", err)
	}
}
