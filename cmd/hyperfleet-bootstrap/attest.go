package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"

	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
)

// Defaults of the attestation flags.
const (
	defaultSPIREAgent    = "/opt/spire/bin/spire-agent"
	defaultSPIREAgentDir = "/run/hyperfleet/spire"
	defaultAttestTimeout = 5 * time.Minute
	// defaultTPMDevice is the kernel's TPM resource manager: spire-agent
	// shares the TPM with whatever else uses it.
	defaultTPMDevice = "/dev/tpmrm0"
	// maxSocketPath: a Unix socket's path must fit in sun_path (108 bytes
	// on Linux, the terminating NUL included).
	maxSocketPath = 107
)

// attestOptions say where the machine's attestation configuration is and
// how to run its SPIRE agent.
type attestOptions struct {
	config    string
	agentBin  string
	agentDir  string
	tpmDevice string
	timeout   time.Duration
}

func (o *attestOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.config, "attestation", "", "Attestation configuration written by cloud-init (spire.MachineConfig); when the file does not exist the machine does not attest. Default: $HYPERFLEET_ATTESTATION_CONFIG, else "+spire.MachineConfigPath+".")
	fs.StringVar(&o.agentBin, "spire-agent", "", "The spire-agent binary. Default: $HYPERFLEET_SPIRE_AGENT, else "+defaultSPIREAgent+".")
	fs.StringVar(&o.agentDir, "spire-agent-dir", "", "Directory for the agent's configuration, data and Workload API socket (made root-only). Default: $HYPERFLEET_SPIRE_AGENT_DIR, else "+defaultSPIREAgentDir+".")
	fs.StringVar(&o.tpmDevice, "tpm-device", "", "The machine's TPM, for method tpm: a device, or a software TPM's Unix socket. Default: $HYPERFLEET_TPM_DEVICE, else "+defaultTPMDevice+".")
	fs.DurationVar(&o.timeout, "attest-timeout", defaultAttestTimeout, "How long attesting and fetching the credentials may take, from the agent's start.")
}

// fill takes what the flags left empty from the environment, else the
// defaults.
func (o *attestOptions) fill(getenv func(string) string) {
	for _, f := range []struct {
		v        *string
		env, def string
	}{
		{&o.config, "HYPERFLEET_ATTESTATION_CONFIG", spire.MachineConfigPath},
		{&o.agentBin, "HYPERFLEET_SPIRE_AGENT", defaultSPIREAgent},
		{&o.agentDir, "HYPERFLEET_SPIRE_AGENT_DIR", defaultSPIREAgentDir},
		{&o.tpmDevice, "HYPERFLEET_TPM_DEVICE", defaultTPMDevice},
	} {
		if *f.v == "" {
			*f.v = getenv(f.env)
		}
		if *f.v == "" {
			*f.v = f.def
		}
	}
}

// takeMachineConfig reads the attestation configuration and deletes it at
// once, as takeConfig does the agent's own: it holds the join token, which
// attests as this machine until it is used. present is false when there is
// no such file: the machine does not attest.
func takeMachineConfig(path string) (data []byte, present bool, err error) {
	if err := rootOnlyDir(path); err != nil {
		return nil, true, err
	}
	data, err = os.ReadFile(path) //nolint:gosec // the path is the operator's to choose
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("reading the attestation configuration %s (written by cloud-init): %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return nil, true, fmt.Errorf("deleting the attestation configuration %s after reading it (it holds the join token): %w", path, err)
	}
	if data == nil {
		data = []byte{} // present, even if empty: callers tell by nil
	}
	return data, true, nil
}

// machineConfig is a checked spire.MachineConfig, with the parts the agent
// and the credential fetch need parsed.
type machineConfig struct {
	spire.MachineConfig
	host        string
	port        int
	trustDomain spiffeid.TrustDomain
	id          spiffeid.ID
	endpoint    *url.URL
	endpointID  spiffeid.ID
}

// parseMachineConfig decodes and checks the attestation configuration.
// Unknown fields are refused, as in bootstrap.json: a field this agent does
// not know is one it would silently not apply. Errors never quote the join
// token.
func parseMachineConfig(data []byte) (machineConfig, error) {
	var c machineConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c.MachineConfig); err != nil {
		return c, fmt.Errorf("the attestation configuration: %w", err)
	}
	var errs []error
	switch c.Method {
	case "", spire.MethodJoinToken:
		if strings.TrimSpace(c.JoinToken) == "" {
			errs = append(errs, errors.New("joinToken is required"))
		}
	case spire.MethodTPM:
		if c.JoinToken != "" {
			// A token beside a TPM would let whoever reads it attest
			// without the TPM: refuse rather than ignore it.
			errs = append(errs, errors.New("joinToken must be empty with method tpm"))
		}
	default:
		errs = append(errs, fmt.Errorf("method %q is neither %s nor %s", c.Method, spire.MethodJoinToken, spire.MethodTPM))
	}
	var err error
	if c.host, c.port, err = splitServerAddress(c.ServerAddress); err != nil {
		errs = append(errs, err)
	}
	if c.trustDomain, err = spiffeid.TrustDomainFromString(c.TrustDomain); err != nil {
		errs = append(errs, fmt.Errorf("trustDomain %q: %w", c.TrustDomain, err))
	} else if b, err := x509bundle.Parse(c.trustDomain, []byte(c.TrustBundle)); err != nil {
		// The agent trusts the server only through this bundle: without
		// one it could not tell the SPIRE server from whatever answers.
		errs = append(errs, fmt.Errorf("trustBundle: %w", err))
	} else if len(b.X509Authorities()) == 0 {
		errs = append(errs, errors.New("trustBundle holds no PEM certificate"))
	}
	if c.id, err = spiffeid.FromString(c.SPIFFEID); err != nil {
		errs = append(errs, fmt.Errorf("spiffeID %q: %w", c.SPIFFEID, err))
	} else if !c.id.MemberOf(c.trustDomain) {
		errs = append(errs, fmt.Errorf("spiffeID %s is not in the trust domain %q", c.id, c.TrustDomain))
	}
	switch {
	case c.CredentialEndpoint == "" && c.EndpointID != "":
		errs = append(errs, errors.New("endpointID without a credentialEndpoint"))
	case c.CredentialEndpoint != "":
		if c.endpoint, err = url.Parse(c.CredentialEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("credentialEndpoint: %w", err))
		} else if c.endpoint.Scheme != "https" || c.endpoint.Host == "" {
			errs = append(errs, fmt.Errorf("credentialEndpoint %q is not an https:// URL", c.CredentialEndpoint))
		}
		if c.endpointID, err = spiffeid.FromString(c.EndpointID); err != nil {
			errs = append(errs, fmt.Errorf("endpointID %q (the credential endpoint's SPIFFE ID, required with credentialEndpoint): %w", c.EndpointID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("the attestation configuration: %w", err)
	}
	return c, nil
}

// splitServerAddress splits the SPIRE server's host:port ([v6]:port for an
// IPv6 address) into the agent's server_address and server_port. The host
// is an IP address or a DNS name: it is written into the agent's
// configuration, which must not be able to say anything else.
func splitServerAddress(addr string) (string, int, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("serverAddress %q is not host:port: %w", addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port < 1 || port > 65535 || portS != strconv.Itoa(port) {
		return "", 0, fmt.Errorf("serverAddress %q: port %q is not a number between 1 and 65535", addr, portS)
	}
	if net.ParseIP(host) == nil && !dnsName(host) {
		return "", 0, fmt.Errorf("serverAddress %q: host %q is neither an IP address nor a DNS name", addr, host)
	}
	return host, port, nil
}

// dnsName: dot-separated labels of letters, digits, "-" and "_", none
// empty, at most 253 bytes in all.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !lowerOrDigit(r) && (r < 'A' || r > 'Z') && r != '-' && r != '_' {
				return false
			}
		}
	}
	return true
}

func lowerOrDigit(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' }

// agentFiles are the paths of one agent run under --spire-agent-dir.
type agentFiles struct {
	dir, conf, token, bundle, data, socket string
	devidCert, devidPub, devidPriv         string
}

func agentPaths(dir string) (agentFiles, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return agentFiles{}, err
	}
	f := agentFiles{
		dir:    dir,
		conf:   filepath.Join(dir, "agent.conf"),
		token:  filepath.Join(dir, "join_token"),
		bundle: filepath.Join(dir, "bundle.pem"),
		data:   filepath.Join(dir, "data"),
		socket: filepath.Join(dir, "agent.sock"),

		devidCert: filepath.Join(dir, "devid.crt"),
		devidPub:  filepath.Join(dir, "devid.pub"),
		devidPriv: filepath.Join(dir, "devid.priv"),
	}
	if len(f.socket) > maxSocketPath {
		return f, fmt.Errorf("the agent's socket %s is %d bytes long, more than a Unix socket path may be (%d): choose a shorter --spire-agent-dir", f.socket, len(f.socket), maxSocketPath)
	}
	return f, nil
}

// remove deletes what an agent run leaves in its directory: the machine's
// agent SVID names the join token (spiffe://<td>/spire/agent/join_token/<token>),
// and nothing there is of use to anyone once the agent has stopped.
func (f agentFiles) remove() error {
	var errs []error
	for _, p := range []string{f.conf, f.token, f.bundle, f.socket, f.data, f.devidCert, f.devidPub, f.devidPriv} {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// write prepares the agent's directory (0700, what an earlier run left
// removed) and writes its configuration, the trust bundle and the join
// token (or, with tpm, the DevID read from the TPM), each 0600. The token
// goes into join_token_file, never onto the agent's command line, where any
// process could read it.
func (f agentFiles) write(c machineConfig, tpmDevice string) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	if fi, err := os.Lstat(f.dir); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", f.dir)
	}
	if err := os.Chmod(f.dir, 0o700); err != nil { //nolint:gosec // a directory: root-only, and searchable by root
		return err
	}
	if err := f.remove(); err != nil {
		return err
	}
	files := []agentFile{{f.bundle, []byte(c.TrustBundle)}}
	attestor, tokenLine := "", ""
	if c.Method == spire.MethodTPM {
		// The DevID the host provisioned (devid.Provision). Nothing in it is
		// secret: its private blob is wrapped by the TPM and useless anywhere
		// else.
		cred, err := devid.ReadPath(tpmDevice)
		if err != nil {
			return fmt.Errorf("%w (--tpm-device)", err)
		}
		files = append(files, agentFile{f.devidCert, cred.CertPEM}, agentFile{f.devidPub, cred.Public}, agentFile{f.devidPriv, cred.Private})
		attestor = fmt.Sprintf(`NodeAttestor "tpm_devid" {
    plugin_data {
      devid_cert_path = %q
      devid_pub_path = %q
      devid_priv_path = %q
      tpm_device_path = %q
    }
  }`, f.devidCert, f.devidPub, f.devidPriv, tpmDevice)
	} else {
		files = append(files, agentFile{f.token, []byte(c.JoinToken)})
		tokenLine = fmt.Sprintf("\n  join_token_file = %q", f.token)
		attestor = `NodeAttestor "join_token" {
    plugin_data {}
  }`
	}
	conf := fmt.Sprintf(`agent {
  server_address = %q
  server_port = %d
  socket_path = %q
  trust_domain = %q
  data_dir = %q%s
  trust_bundle_path = %q
  log_level = "INFO"
}

plugins {
  %s
  # The machine's key lives only in the agent's memory: it goes when the
  # agent stops, and with it the identity.
  KeyManager "memory" {
    plugin_data {}
  }
  WorkloadAttestor "unix" {
    plugin_data {}
  }
}
`, c.host, c.port, f.socket, c.trustDomain.Name(), f.data, tokenLine, f.bundle, attestor)
	files = append(files, agentFile{f.conf, []byte(conf)})
	for _, w := range files {
		if err := writeNew(w.path, w.data); err != nil {
			return err
		}
	}
	return nil
}

// agentFile is one file of the agent's directory and what it holds.
type agentFile struct {
	path string
	data []byte
}

// writeNew creates path (0600), refusing one that exists: remove just
// deleted it, so one there now was put there by someone else.
func writeNew(path string, data []byte) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600) //nolint:gosec // under the agent's own directory
	if err != nil {
		return err
	}
	if _, err := out.Write(data); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// attestation is one attested run of the machine's SPIRE agent.
type attestation struct {
	cfg    machineConfig
	files  agentFiles
	agent  *agentProcess
	source *workloadapi.X509Source
	// started is when the agent started: the timeout and the latencies
	// logged count from it.
	started time.Time
}

// attest starts the machine's SPIRE agent with the join token and waits
// until the Workload API hands this process an X509-SVID for exactly the
// configured SPIFFE ID. The join token's file is deleted as soon as the
// SVID is there (the token is used by then, but nothing needs it any
// more). On error the agent is stopped; otherwise close does that.
func attest(ctx context.Context, raw []byte, opts attestOptions, console io.Writer, log func(string, ...any)) (*attestation, error) {
	cfg, err := parseMachineConfig(raw)
	if err != nil {
		return nil, err
	}
	files, err := agentPaths(opts.agentDir)
	if err != nil {
		return nil, err
	}
	if err := files.write(cfg, opts.tpmDevice); err != nil {
		_ = files.remove()
		return nil, fmt.Errorf("writing the SPIRE agent's configuration in %s: %w", files.dir, err)
	}
	a := &attestation{cfg: cfg, files: files, started: time.Now()}
	a.agent, err = startAgent(opts.agentBin, files.conf, cfg.JoinToken, console)
	if err != nil {
		_ = files.remove()
		return nil, err
	}
	log("Attesting to %s as %s (spire-agent pid %d)", cfg.ServerAddress, cfg.id, a.agent.pid())
	if a.source, err = a.waitSVID(ctx, files.socket); err != nil {
		a.close(log)
		return nil, err
	}
	if err := os.Remove(files.token); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.close(log)
		return nil, fmt.Errorf("deleting the join token's file: %w", err)
	}
	log("Attested as %s after %s", cfg.id, time.Since(a.started).Round(time.Millisecond))
	return a, nil
}

// workloadAPIPoll is how often the Workload API client tries again while
// the agent is still attesting (no socket yet, or no identity issued yet).
// The client's own backoff grows by a second each try, up to 30 s, which
// would add seconds to every boot; the socket is local, so a short fixed
// interval costs nothing.
const workloadAPIPoll = 250 * time.Millisecond

type fixedBackoff struct{}

func (fixedBackoff) NewBackoff() workloadapi.Backoff { return fixedBackoff{} }
func (fixedBackoff) Next() time.Duration             { return workloadAPIPoll }
func (fixedBackoff) Reset()                          {}

// waitSVID waits for the configured SVID, the agent's exit or ctx,
// whichever comes first.
func (a *attestation) waitSVID(ctx context.Context, socket string) (*workloadapi.X509Source, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-a.agent.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	want := a.cfg.id
	// The Workload API may hand this process several SVIDs (one per entry
	// whose selectors match it); only the one minted for this machine's
	// bootstrap workload proves anything to the credential endpoint.
	pick := func(svids []*x509svid.SVID) *x509svid.SVID {
		for _, s := range svids {
			if s.ID == want {
				return s
			}
		}
		return nil
	}
	source, err := workloadapi.NewX509Source(ctx,
		workloadapi.WithClientOptions(workloadapi.WithAddr("unix://"+socket), workloadapi.WithBackoffStrategy(fixedBackoff{})),
		workloadapi.WithDefaultX509SVIDPicker(pick))
	for err == nil {
		if _, err = source.GetX509SVID(); err == nil {
			return source, nil
		}
		select {
		case <-source.Updated():
			err = nil
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if source != nil {
		_ = source.Close()
	}
	if a.agent.exited() {
		return nil, fmt.Errorf("spire-agent exited (%w) before the machine was attested as %s; its last lines:\n%s", a.agent.exitErr(), want, a.agent.lastLines())
	}
	return nil, fmt.Errorf("no X509-SVID for %s from the SPIRE agent after %s (%w); its last lines:\n%s", want, time.Since(a.started).Round(time.Second), err, a.agent.lastLines())
}

// close stops the agent and removes its files. The SVID's private key
// stays in this process's memory only, which no job can read.
func (a *attestation) close(log func(string, ...any)) {
	if a.source != nil {
		_ = a.source.Close()
		a.source = nil
	}
	a.agent.stop(log)
	if err := a.files.remove(); err != nil {
		log("ERROR removing the SPIRE agent's files: %v", err)
	}
}
