package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/hyperfleet/hyperfleet/internal/sim/spiretest"
	"github.com/hyperfleet/hyperfleet/providers/github"
	"github.com/hyperfleet/hyperfleet/providers/spire"
)

const (
	attestTD     = "example.org"
	installation = "inst1"
)

// spireLab is the operator's side of attestation, played by the test on a
// real spire-server: join tokens, the bootstrap workload's entry, and a
// credential endpoint with an SVID the server minted.
type spireLab struct {
	srv      *spiretest.Server
	client   *spire.Client
	bundle   []byte
	agentBin string
	// tpm, with newTPMSPIRELab: the host's vTPM manufacturer and DevID CA.
	tpm *spiretest.TPMLab
}

func newSPIRELab(t *testing.T) *spireLab {
	t.Helper()
	return spireLabOn(t, spiretest.StartServer(t, attestTD))
}

// newTPMSPIRELab is a spireLab whose server also attests TPMs (tpm_devid).
func newTPMSPIRELab(t *testing.T) *spireLab {
	t.Helper()
	srv, tpm := spiretest.StartServerWithTPM(t, attestTD)
	l := spireLabOn(t, srv)
	l.tpm = tpm
	return l
}

func spireLabOn(t *testing.T, srv *spiretest.Server) *spireLab {
	t.Helper()
	c, err := spire.DialSocket(srv.SocketPath, attestTD, installation)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	bundle, err := c.TrustBundle(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return &spireLab{srv: srv, client: c, bundle: bundle, agentBin: filepath.Join(spiretest.Dir(t), "spire-agent")}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// machine does what the operator does for a new machine: a join token
// bound to its ID, and the entry for its bootstrap workload (this test
// process's uid). It returns the machine's configuration, without a
// credential endpoint.
func (s *spireLab) machine(t *testing.T, name string) spire.MachineConfig {
	t.Helper()
	m, mc := s.register(t, name)
	tok, err := s.client.CreateJoinToken(testCtx(t), m, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mc.JoinToken = tok.Value
	return mc
}

// register is what the operator does for any attesting machine: the entry
// for its bootstrap workload (this test process's uid). It returns the
// machine and its configuration, without a token or a credential endpoint.
func (s *spireLab) register(t *testing.T, name string) (spire.MachineID, spire.MachineConfig) {
	t.Helper()
	m := spire.MachineID{TrustDomain: attestTD, Installation: installation, Kind: "MachineClaim", Namespace: "ci", Name: name, UID: "uid-" + name}
	w, err := m.Workload(spire.BootstrapWorkload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.CreateEntry(testCtx(t), spire.EntrySpec{SPIFFEID: w, Parent: m, Selectors: []spire.Selector{{Type: "unix", Value: fmt.Sprintf("uid:%d", os.Getuid())}}}); err != nil {
		t.Fatal(err)
	}
	return m, spire.MachineConfig{
		ServerAddress: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.srv.Port)),
		TrustDomain:   attestTD,
		TrustBundle:   string(s.bundle),
		SPIFFEID:      w,
	}
}

// tpmMachine does what the operator and the host do for a machine that
// attests with its TPM: a node alias for the DevID subject CN of the
// machine's UID, its bootstrap workload's entry, and a vTPM the host
// provisioned with that DevID. It returns the machine's configuration
// (method tpm, no token) and the vTPM's socket.
func (s *spireLab) tpmMachine(t *testing.T, name string) (spire.MachineConfig, string) {
	t.Helper()
	m, mc := s.register(t, name)
	if _, err := s.client.CreateTPMAlias(testCtx(t), m, m.UID); err != nil {
		t.Fatal(err)
	}
	mc.Method = spire.MethodTPM
	return mc, s.tpm.NewTPM(t, m.UID).Path
}

// endpoint is a credential endpoint: it serves with an SVID for id, and
// answers machine (checked on the peer's SVID) with answer; calls counts
// the requests that reached the handler.
type endpoint struct {
	url   string
	calls atomic.Int32
	// posted is closed on the first request the handler answers.
	posted chan struct{}
	once   sync.Once
}

func (s *spireLab) endpoint(t *testing.T, id, machine string, answer func(w http.ResponseWriter, call int)) *endpoint {
	t.Helper()
	csr, key, err := spire.NewCSR(id)
	if err != nil {
		t.Fatal(err)
	}
	minted, err := s.client.MintX509SVID(testCtx(t), csr, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	svid := &x509svid.SVID{ID: spiffeid.RequireFromString(minted.ID), PrivateKey: key}
	for _, der := range minted.CertChain {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		svid.Certificates = append(svid.Certificates, c)
	}
	bundle, err := x509bundle.Parse(spiffeid.RequireTrustDomainFromString(attestTD), s.bundle)
	if err != nil {
		t.Fatal(err)
	}
	e := &endpoint{posted: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != spire.CredentialsPath || r.Method != http.MethodPost {
			http.Error(w, "no such endpoint", http.StatusNotFound)
			return
		}
		// TLS let any SVID of the trust domain in; the answer is for the
		// machine's bootstrap workload only, as the operator's is.
		peer, err := x509svid.IDFromCert(r.TLS.PeerCertificates[0])
		if err != nil || peer.String() != machine {
			http.Error(w, "not this machine's", http.StatusForbidden)
			return
		}
		answer(w, int(e.calls.Add(1)))
		e.once.Do(func() { close(e.posted) })
	}))
	// Serving TLS on the listener itself: StartTLS would add httptest's own
	// certificate, which a client that sends no server name (an IP
	// address) is served instead of the SVID.
	srv.Listener = tls.NewListener(srv.Listener, tlsconfig.MTLSServerConfig(svid, bundle, tlsconfig.AuthorizeMemberOf(bundle.TrustDomain())))
	srv.Start()
	t.Cleanup(srv.Close)
	e.url = "https://" + srv.Listener.Addr().String() + spire.CredentialsPath
	return e
}

func jsonAnswer(t *testing.T, v any) func(http.ResponseWriter, int) {
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, _ int) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	}
}

// console is the agent's console: written by the agent's log and the
// SPIRE agent's output at once, and watched by the test.
type console struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newConsole() *console { return &console{changed: make(chan struct{})} }

func (c *console) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.changed)
	c.changed = make(chan struct{})
	return c.buf.Write(b)
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// waitFor waits until the console shows want; false if done closes first.
func (c *console) waitFor(want string, done <-chan struct{}) bool {
	for {
		c.mu.Lock()
		has, changed := strings.Contains(c.buf.String(), want), c.changed
		c.mu.Unlock()
		if has {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return strings.Contains(c.String(), want)
		}
	}
}

// writeMachineConfig writes the attestation configuration where the lab's
// cloud-init would.
func writeMachineConfig(t *testing.T, dir string, mc spire.MachineConfig) string {
	t.Helper()
	data, err := json.Marshal(mc)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "etc", "hyperfleet", "attestation.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// attestArgs are the flags pointing the agent at the lab: the attestation
// configuration, the real spire-agent and its directory inside the VM's
// root (so a job's search covers it).
func (s *spireLab) attestArgs(t *testing.T, root, attPath string) []string {
	t.Helper()
	dir := filepath.Join(root, "run", "hyperfleet", "spire")
	if len(filepath.Join(dir, "agent.sock")) > maxSocketPath {
		// Unix socket paths are short; t.TempDir's can be long.
		d, err := os.MkdirTemp("", "hfat")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
		dir = filepath.Join(d, "spire")
	}
	return []string{"--attestation", attPath, "--spire-agent", s.agentBin, "--spire-agent-dir", dir, "--attest-timeout", "3m"}
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name {
			return args[i+1]
		}
	}
	return ""
}

var (
	pidRe      = regexp.MustCompile(`Attesting to \S+ as \S+ \(spire-agent pid (\d+)\)`)
	attestedRe = regexp.MustCompile(`Attested as \S+ after (\S+)\n`)
	receivedRe = regexp.MustCompile(`Credentials received after (\S+): `)
)

func agentPID(t *testing.T, out string) int {
	t.Helper()
	m := pidRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the console names no spire-agent pid:\n%s", out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// noAgentFiles fails the test if the agent's directory still holds a file
// of the run (the join token's above all).
func noAgentFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the agent's directory still holds %s after the run", e.Name())
	}
}

// (a) Runner mode, end to end: the machine attests with a real spire-agent
// against a real spire-server, gets its JIT config from the credential
// endpoint over mTLS, and the runner runs its job. The agent is stopped
// before run.sh starts (the job, which lists every process, sees none),
// and neither the join token nor the JIT config is anywhere a job or the
// console can see.
func TestAttestedRunnerGetsItsJITConfigFromTheEndpoint(t *testing.T) {
	l := newLab(t)
	s := newSPIRELab(t)
	ctx := testCtx(t)
	jit, err := l.gh.GenerateJITConfig(ctx, l.scope, github.JITConfigRequest{Name: "pool-att01", Labels: []string{"self-hosted", "linux", "x64"}})
	if err != nil {
		t.Fatal(err)
	}
	job, err := l.sim.QueueJob("acme/widgets", []string{"self-hosted"})
	if err != nil {
		t.Fatal(err)
	}
	mc := s.machine(t, "runner-a")
	ep := s.endpoint(t, spire.EndpointID(attestTD, installation), mc.SPIFFEID, jsonAnswer(t, spire.Credentials{"jitConfig": jit.Encoded}))
	mc.CredentialEndpoint, mc.EndpointID = ep.url, spire.EndpointID(attestTD, installation)
	attPath := writeMachineConfig(t, l.dir, mc)
	path := l.config(t, Config{Name: "pool-att01"})
	out := l.jobOutput(t)
	t.Setenv("FAKERUNNER_JOB_OUTPUT", out)
	t.Setenv("FAKERUNNER_VM_ROOT", l.dir)
	args := append([]string{"--config", path}, s.attestArgs(t, l.dir, attPath)...)

	con := newConsole()
	if code := run(args, con, con, noEnv); code != 0 {
		t.Fatalf("exit %d:\n%s", code, con.String())
	}
	text := con.String()
	if j, _ := l.sim.Job(job); j.Status != "completed" || j.RunnerName != "pool-att01" {
		t.Fatalf("job %+v\n%s", j, text)
	}
	if n := ep.calls.Load(); n != 1 {
		t.Errorf("the endpoint answered %d requests, want 1", n)
	}
	configGone(t, path)
	configGone(t, attPath)
	noAgentFiles(t, flagValue(args, "--spire-agent-dir"))

	// The agent's own output reached the console, its ID redacted.
	if !strings.Contains(text, "/spire/agent/join_token/<join token>") {
		t.Errorf("the console lacks the agent's ID with the token redacted:\n%s", text)
	}
	for name, secret := range map[string]string{"join token": mc.JoinToken, "JIT config": jit.Encoded} {
		if strings.Contains(text, secret) {
			t.Errorf("the %s is on the console", name)
		}
	}

	// What the job saw, while run.sh ran: every readable file under the
	// VM's root and every process's command line and environment.
	seen := l.seen(t, out)
	if !strings.Contains(seen, fmt.Sprintf("proc %d cmdline\n", os.Getpid())) {
		t.Fatal("the job did not list the test's own process: its process listing cannot show an agent either")
	}
	pid := agentPID(t, text)
	// This agent's command line, not any spire-agent's: other packages'
	// tests (internal/attested, internal/sandbox) run theirs on this
	// machine at the same time under `go test ./...`.
	ownAgent := "spire-agent run -config " + filepath.Join(flagValue(args, "--spire-agent-dir"), "agent.conf")
	if strings.Contains(seen, fmt.Sprintf("proc %d cmdline\n", pid)) || strings.Contains(seen, ownAgent) {
		t.Error("the SPIRE agent was still running while the job ran")
	}
	for name, secret := range map[string]string{"join token": mc.JoinToken, "JIT config": jit.Encoded} {
		if strings.Contains(seen, secret) {
			t.Errorf("the job found the %s", name)
		}
	}
	if i, j := strings.Index(text, "Stopped spire-agent"), strings.Index(text, "Starting runner pool-att01"); i < 0 || j < i {
		t.Errorf("the agent was not stopped before the runner started:\n%s", text)
	}

	attested := attestedRe.FindStringSubmatch(text)
	received := receivedRe.FindStringSubmatch(text)
	if attested == nil || received == nil {
		t.Fatalf("the console lacks the attested/received lines:\n%s", text)
	}
	a, _ := time.ParseDuration(attested[1])
	r, _ := time.ParseDuration(received[1])
	t.Logf("latency: agent start → SVID %s, SVID → credentials %s", a, r-a)
}

// A machine that attests with its TPM (SPIRE's tpm_devid on a software
// TPM the host provisioned) gets its JIT config the same way, with no
// secret in its user data at all; the DevID files the agent needed are
// gone with it.
func TestAttestedRunnerWithTPM(t *testing.T) {
	l := newLab(t)
	s := newTPMSPIRELab(t)
	ctx := testCtx(t)
	jit, err := l.gh.GenerateJITConfig(ctx, l.scope, github.JITConfigRequest{Name: "pool-tpm01", Labels: []string{"self-hosted", "linux", "x64"}})
	if err != nil {
		t.Fatal(err)
	}
	job, err := l.sim.QueueJob("acme/widgets", []string{"self-hosted"})
	if err != nil {
		t.Fatal(err)
	}
	mc, tpm := s.tpmMachine(t, "runner-t")
	ep := s.endpoint(t, spire.EndpointID(attestTD, installation), mc.SPIFFEID, jsonAnswer(t, spire.Credentials{"jitConfig": jit.Encoded}))
	mc.CredentialEndpoint, mc.EndpointID = ep.url, spire.EndpointID(attestTD, installation)
	attPath := writeMachineConfig(t, l.dir, mc)
	path := l.config(t, Config{Name: "pool-tpm01"})
	t.Setenv("FAKERUNNER_JOB_OUTPUT", l.jobOutput(t))
	t.Setenv("FAKERUNNER_VM_ROOT", l.dir)
	args := append([]string{"--config", path}, s.attestArgs(t, l.dir, attPath)...)
	args = append(args, "--tpm-device", tpm)

	con := newConsole()
	if code := run(args, con, con, noEnv); code != 0 {
		t.Fatalf("exit %d:\n%s", code, con.String())
	}
	text := con.String()
	if j, _ := l.sim.Job(job); j.Status != "completed" || j.RunnerName != "pool-tpm01" {
		t.Fatalf("job %+v\n%s", j, text)
	}
	if n := ep.calls.Load(); n != 1 {
		t.Errorf("the endpoint answered %d requests, want 1", n)
	}
	if !strings.Contains(text, "/spire/agent/tpm_devid/") {
		t.Errorf("the agent did not attest with tpm_devid:\n%s", text)
	}
	if strings.Contains(text, jit.Encoded) {
		t.Error("the JIT config is on the console")
	}
	configGone(t, path)
	configGone(t, attPath)
	noAgentFiles(t, flagValue(args, "--spire-agent-dir"))
	if attested := attestedRe.FindStringSubmatch(text); attested != nil {
		t.Logf("latency: agent start → SVID %s (tpm_devid)", attested[1])
	}
}

// A TPM that was never provisioned fails at once, naming the TPM and what
// is missing, before any agent starts.
func TestTPMWithoutDevIDFailsAtOnce(t *testing.T) {
	l := newLab(t)
	s := newTPMSPIRELab(t)
	mc, _ := s.tpmMachine(t, "runner-u")
	empty := s.tpm.NewTPM(t, "")
	attPath := writeMachineConfig(t, l.dir, mc)
	args := append([]string{"attest"}, s.attestArgs(t, l.dir, attPath)...)
	args = append(args, "--tpm-device", empty.Path)
	con := newConsole()
	if code := run(args, con, con, noEnv); code == 0 {
		t.Fatalf("attest with an unprovisioned TPM succeeded:\n%s", con.String())
	}
	if text := con.String(); !strings.Contains(text, empty.Path) || !strings.Contains(text, "provisioned with a DevID") {
		t.Errorf("the error does not name the TPM and the missing DevID:\n%s", text)
	}
	noAgentFiles(t, flagValue(args, "--spire-agent-dir"))
}

// failingRun runs runner mode against an endpoint that answers with answer
// and returns the exit code, the console and the endpoint.
func failingRun(t *testing.T, answer func(http.ResponseWriter, int), endpointID string) (int, string, *endpoint, *lab) {
	t.Helper()
	l := newLab(t)
	s := newSPIRELab(t)
	mc := s.machine(t, "runner-f")
	ep := s.endpoint(t, endpointID, mc.SPIFFEID, answer)
	mc.CredentialEndpoint, mc.EndpointID = ep.url, spire.EndpointID(attestTD, installation)
	attPath := writeMachineConfig(t, l.dir, mc)
	path := l.config(t, Config{Name: "pool-fail"})
	args := append([]string{"--config", path}, s.attestArgs(t, l.dir, attPath)...)
	con := newConsole()
	code := run(args, con, con, noEnv)
	text := con.String()
	if strings.Contains(text, mc.JoinToken) {
		t.Error("the join token is on the console")
	}
	if !l.poweredOff() {
		t.Error("the agent did not power off after the failure")
	}
	noAgentFiles(t, flagValue(args, "--spire-agent-dir"))
	configGone(t, attPath)
	return code, text, ep, l
}

// (b) An endpoint that has already handed the credentials out (409) fails
// the bootstrap at once: one request, its status in the error.
func TestAttestedRunnerFailsAtOnceOnConflict(t *testing.T) {
	code, text, ep, _ := failingRun(t, func(w http.ResponseWriter, _ int) {
		http.Error(w, "the credentials were already handed out", http.StatusConflict)
	}, spire.EndpointID(attestTD, installation))
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, text)
	}
	if !strings.Contains(text, "answered 409 Conflict: \"the credentials were already handed out\"") {
		t.Errorf("the error does not name the 409 and its message:\n%s", text)
	}
	if n := ep.calls.Load(); n != 1 {
		t.Errorf("the endpoint answered %d requests, want exactly 1 (no retry after a 409)", n)
	}
	if strings.Contains(text, "Starting runner") || strings.Contains(text, "Downloading") {
		t.Errorf("the runner was set up without credentials:\n%s", text)
	}
}

// (c) An endpoint whose SVID is not the configured endpoint ID is refused
// in the TLS handshake: no request reaches it, and no retry follows.
func TestAttestedRunnerRefusesAnImpostorEndpoint(t *testing.T) {
	impostor := spire.InstallationPrefix(attestTD, installation) + "impostor"
	code, text, ep, _ := failingRun(t, jsonAnswer(t, spire.Credentials{"jitConfig": "x"}), impostor)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, text)
	}
	if !strings.Contains(text, errWrongEndpoint.Error()) || !strings.Contains(text, impostor) {
		t.Errorf("the error does not say the endpoint is %s, not the one configured:\n%s", impostor, text)
	}
	if n := ep.calls.Load(); n != 0 {
		t.Errorf("the impostor answered %d requests, want none", n)
	}
	if strings.Contains(text, "trying again") {
		t.Errorf("an impostor was tried again:\n%s", text)
	}
}

// (d) 503 twice, then the credentials (a registration token and url): the
// agent tries again and the runner registers and runs.
func TestAttestedRunnerRetriesUnavailable(t *testing.T) {
	l := newLab(t)
	s := newSPIRELab(t)
	tok, err := l.gh.RegistrationToken(testCtx(t), l.scope)
	if err != nil {
		t.Fatal(err)
	}
	job, err := l.sim.QueueJob("acme/widgets", []string{"self-hosted"})
	if err != nil {
		t.Fatal(err)
	}
	mc := s.machine(t, "runner-d")
	creds := jsonAnswer(t, spire.Credentials{"token": tok.Value, "url": l.gh.RunnerURL(l.scope)})
	ep := s.endpoint(t, spire.EndpointID(attestTD, installation), mc.SPIFFEID, func(w http.ResponseWriter, call int) {
		if call <= 2 {
			http.Error(w, "the claim is not ready", http.StatusServiceUnavailable)
			return
		}
		creds(w, call)
	})
	mc.CredentialEndpoint, mc.EndpointID = ep.url, spire.EndpointID(attestTD, installation)
	attPath := writeMachineConfig(t, l.dir, mc)
	path := l.config(t, Config{Name: "pool-att03"})
	args := append([]string{"--config", path}, s.attestArgs(t, l.dir, attPath)...)
	con := newConsole()
	if code := run(args, con, con, noEnv); code != 0 {
		t.Fatalf("exit %d:\n%s", code, con.String())
	}
	text := con.String()
	if n := ep.calls.Load(); n != 3 {
		t.Errorf("the endpoint answered %d requests, want 3", n)
	}
	if got := strings.Count(text, "is not ready (503 \"the claim is not ready\"); trying again"); got != 2 {
		t.Errorf("%d retries logged, want 2:\n%s", got, text)
	}
	if j, _ := l.sim.Job(job); j.Status != "completed" || j.RunnerName != "pool-att03" {
		t.Errorf("job %+v", j)
	}
	if !strings.Contains(text, "Credentials received after") || !strings.Contains(text, ": token, url\n") {
		t.Errorf("the console does not name the credentials received:\n%s", text)
	}
	if strings.Contains(text, tok.Value) {
		t.Error("the registration token is on the console")
	}
}

// attestInBackground runs `hyperfleet-bootstrap attest` until cancel.
func attestInBackground(t *testing.T, args []string) (con *console, cancel context.CancelFunc, done chan struct{}, code *int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	con, done, code = newConsole(), make(chan struct{}), new(int)
	go func() {
		defer close(done)
		*code = runContext(ctx, append([]string{"attest"}, args...), con, con, noEnv)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return con, cancel, done, code
}

// (f) `attest` on a machine whose workload is none: it attests, POSTs once
// (204, no credentials), and keeps the agent running, so the machine keeps
// its identity, until it is cancelled; then the agent is gone.
func TestAttestCommandKeepsTheAgentUntilCancelled(t *testing.T) {
	s := newSPIRELab(t)
	mc := s.machine(t, "worker-f")
	ep := s.endpoint(t, spire.EndpointID(attestTD, installation), mc.SPIFFEID, func(w http.ResponseWriter, _ int) {
		w.WriteHeader(http.StatusNoContent)
	})
	mc.CredentialEndpoint, mc.EndpointID = ep.url, spire.EndpointID(attestTD, installation)
	root := t.TempDir()
	attPath := writeMachineConfig(t, root, mc)
	args := s.attestArgs(t, root, attPath)
	dir := flagValue(args, "--spire-agent-dir")
	con, cancel, done, code := attestInBackground(t, args)

	if !con.waitFor("keeps the machine's identity until it exits", done) {
		t.Fatalf("attest ended (exit %d) without attesting:\n%s", *code, con.String())
	}
	if n := ep.calls.Load(); n != 1 {
		t.Errorf("the endpoint answered %d requests, want 1", n)
	}
	configGone(t, attPath)
	if _, err := os.Stat(filepath.Join(dir, "join_token")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the join token's file is still there once attested (stat: %v)", err)
	}
	pid := agentPID(t, con.String())
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("the agent is not running after attest: %v\n%s", err, con.String())
	}
	if bytes.Contains(cmdline, []byte(mc.JoinToken)) {
		t.Error("the join token is on the agent's command line")
	}
	// The agent serves its Workload API: the machine keeps its identity.
	if out, err := exec.Command(s.agentBin, "healthcheck", "-socketPath", filepath.Join(dir, "agent.sock")).CombinedOutput(); err != nil {
		t.Fatalf("the agent is not healthy while attest runs: %v: %s", err, out)
	}
	select {
	case <-done:
		t.Fatalf("attest returned (exit %d) before it was cancelled:\n%s", *code, con.String())
	default:
	}

	cancel()
	<-done
	text := con.String()
	if *code != 0 {
		t.Fatalf("exit %d after cancel, want 0:\n%s", *code, text)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the agent (pid %d) is still there after attest returned: %v", pid, err)
	}
	noAgentFiles(t, dir)
	if strings.Contains(text, mc.JoinToken) {
		t.Error("the join token is on the console")
	}
	if !strings.Contains(text, "no credentials for this machine (204)") {
		t.Errorf("the console does not say the endpoint had no credentials:\n%s", text)
	}
}

// (e) A join token is single-use: a machine configuration that presents a
// used one fails as soon as the agent gives up, with the server's refusal
// from the agent's log, not at the timeout.
func TestAUsedJoinTokenFailsWithTheRefusal(t *testing.T) {
	s := newSPIRELab(t)
	mc := s.machine(t, "runner-e")
	root := t.TempDir()
	args := s.attestArgs(t, root, writeMachineConfig(t, root, mc))
	con, cancel, done, code := attestInBackground(t, args)
	if !con.waitFor("keeps the machine's identity until it exits", done) {
		t.Fatalf("the first attestation failed (exit %d):\n%s", *code, con.String())
	}
	cancel()
	<-done

	l := newLab(t)
	attPath := writeMachineConfig(t, l.dir, mc)
	path := l.config(t, Config{Name: "pool-used"})
	args = append([]string{"--config", path}, s.attestArgs(t, l.dir, attPath)...)
	again := newConsole()
	if code := run(args, again, again, noEnv); code != 1 {
		t.Fatalf("exit %d with a used token, want 1:\n%s", code, again.String())
	}
	text := again.String()
	if !strings.Contains(text, "spire-agent exited") || !strings.Contains(text, "join token does not exist or has already been used") {
		t.Errorf("the error is not the agent's exit with the server's refusal:\n%s", text)
	}
	if strings.Contains(text, "no X509-SVID") {
		t.Errorf("the bootstrap waited for the timeout instead of the agent's exit:\n%s", text)
	}
	if strings.Contains(text, mc.JoinToken) {
		t.Error("the join token is on the console")
	}
	if !l.poweredOff() {
		t.Error("the agent did not power off after the failure")
	}
	noAgentFiles(t, flagValue(args, "--spire-agent-dir"))
}

// Without an attestation file, bootstrap.json must carry the credential;
// with one, it may leave it to the endpoint.
func TestCredentialsMayComeLaterOnlyWhenAttesting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.json")
	write := func() {
		if err := os.WriteFile(p, []byte(`{"name":"n"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write()
	if _, err := loadConfig(p, noEnv, false); err == nil || !strings.Contains(err.Error(), "token (a registration token) or jitConfig is required") {
		t.Errorf("without attestation: %v, want the credential required", err)
	}
	write()
	c, err := loadConfig(p, noEnv, true)
	if err != nil {
		t.Fatalf("with attestation: %v", err)
	}
	if err := applyCredentials(&c, spire.Credentials{"jitConfig": "j", "password": "p"}); err == nil || !strings.Contains(err.Error(), "password") || strings.Contains(err.Error(), `"p"`) {
		t.Errorf("an unknown credential: %v, want its name (and not its value) in an error", err)
	}
	c.JITConfig = ""
	if err := applyCredentials(&c, nil); err == nil || !strings.Contains(err.Error(), "jitConfig is required") {
		t.Errorf("no credentials at all: %v, want the credential required", err)
	}
	c.URL = "https://github.com/acme/widgets"
	if err := applyCredentials(&c, spire.Credentials{"token": "t", "url": "https://elsewhere.example"}); err != nil || c.Token != "t" || c.URL != "https://github.com/acme/widgets" {
		t.Errorf("token and url: %v, %+v; want the token, and bootstrap.json's url kept", err, c)
	}
}

// A join token split across the agent's writes is still replaced, and a
// line longer than the buffer never shows a piece of one.
func TestRedactorNeverShowsTheToken(t *testing.T) {
	const secret = "0f1e2d3c-4b5a-6978-8a9b-acbdcedf0011"
	var out bytes.Buffer
	r := newRedactor(&out, secret)
	msg := "agent spiffe://example.org/spire/agent/join_token/" + secret + " attested\n"
	for i := range msg { // one byte a write
		_, _ = r.Write([]byte{msg[i]})
	}
	long := strings.Repeat("x", flushAt+7) + secret + strings.Repeat("y", flushAt) + secret[:10]
	_, _ = r.Write([]byte(long))
	r.flush()
	got := out.String()
	if strings.Contains(got, secret) || strings.Contains(got, secret[:len(secret)-1]) {
		t.Fatal("the token (or all but its last byte) went through")
	}
	if strings.Count(got, "<join token>") != 2 || !strings.HasSuffix(got, secret[:10]) {
		t.Errorf("want two replacements and the rest unchanged; got %d replacements, %d bytes", strings.Count(got, "<join token>"), len(got))
	}
	if !strings.Contains(r.last(), "join_token/<join token> attested") {
		t.Errorf("last lines %q", r.last())
	}
}

func TestSplitServerAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"spire.example.org:8081": "spire.example.org 8081",
		"10.0.0.1:443":           "10.0.0.1 443",
		"[fd00::1]:8081":         "fd00::1 8081",
	} {
		host, port, err := splitServerAddress(addr)
		if err != nil || fmt.Sprintf("%s %d", host, port) != want {
			t.Errorf("%s: %s %d %v, want %s", addr, host, port, err, want)
		}
	}
	for _, bad := range []string{"spire.example.org", "fd00::1:8081", "host:0", "host:65536", "host:+81", ":8081", `a"b:1`, "a b:1", "a..b:1"} {
		if _, _, err := splitServerAddress(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// FuzzSplitServerAddress: what is accepted joins back to an address that
// splits the same, and its host can be written into the agent's HCL
// configuration as is (no quote, backslash, space or control character).
func FuzzSplitServerAddress(f *testing.F) {
	for _, s := range []string{"spire:8081", "[::1]:1", "1.2.3.4:65535", "a_b.c-d:80", "[fe80::1%eth0]:8081"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		host, port, err := splitServerAddress(addr)
		if err != nil {
			return
		}
		if strings.ContainsAny(host, "\"\\ \n\r\t${}") || port < 1 || port > 65535 {
			t.Fatalf("%q → %q %d", addr, host, port)
		}
		h2, p2, err := splitServerAddress(net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("%q → %q %d, which joins to something that splits to %q %d %v", addr, host, port, h2, p2, err)
		}
	})
}

func TestParseMachineConfigRefusesWhatTheAgentCannotUse(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	good := spire.MachineConfig{JoinToken: "tok-secret", ServerAddress: "spire:8081", TrustDomain: attestTD,
		TrustBundle: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		SPIFFEID:    "spiffe://example.org/hyperfleet/i/MachineClaim/ns/n/u/bootstrap"}
	data, _ := json.Marshal(good)
	if _, err := parseMachineConfig(data); err != nil {
		t.Fatalf("a good configuration is refused: %v", err)
	}
	for name, c := range map[string]func(*spire.MachineConfig){
		"no bundle":            func(c *spire.MachineConfig) { c.TrustBundle = "" },
		"another trust domain": func(c *spire.MachineConfig) { c.SPIFFEID = "spiffe://other.org/x" },
		"plain http endpoint": func(c *spire.MachineConfig) {
			c.CredentialEndpoint, c.EndpointID = "http://op:8443/v1/credentials", "spiffe://example.org/e"
		},
		"endpoint without ID":   func(c *spire.MachineConfig) { c.CredentialEndpoint = "https://op:8443/v1/credentials" },
		"no token":              func(c *spire.MachineConfig) { c.JoinToken = "" },
		"a token beside a TPM":  func(c *spire.MachineConfig) { c.Method = spire.MethodTPM },
		"an unknown method":     func(c *spire.MachineConfig) { c.Method = "password" },
		"server without a port": func(c *spire.MachineConfig) { c.ServerAddress = "spire" },
	} {
		mc := good
		c(&mc)
		data, _ := json.Marshal(mc)
		_, err := parseMachineConfig(data)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "tok-secret") {
			t.Errorf("%s: the error shows the join token: %v", name, err)
		}
	}
	tpm := good
	tpm.Method, tpm.JoinToken = spire.MethodTPM, ""
	data, _ = json.Marshal(tpm)
	if _, err := parseMachineConfig(data); err != nil {
		t.Errorf("a TPM configuration is refused: %v", err)
	}
	if _, err := parseMachineConfig([]byte(`{"joinToken":"t","extra":1}`)); err == nil || !strings.Contains(err.Error(), "unknown field") {
		t.Errorf("an unknown field: %v", err)
	}
}

// `attest` without an attestation file has nothing to attest with: an
// error, not a machine that silently has no identity.
func TestAttestCommandNeedsItsFile(t *testing.T) {
	var out bytes.Buffer
	missing := filepath.Join(t.TempDir(), "attestation.json")
	if code := runContext(context.Background(), []string{"attest", "--attestation", missing}, &out, &out, noEnv); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "no attestation configuration at "+missing) {
		t.Errorf("the error does not name the missing file:\n%s", out.String())
	}
}
