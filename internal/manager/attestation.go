//go:build !hourglass

package manager

import (
	"cmp"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
)

// AttestationOptions configure SPIFFE attestation: the SPIRE server the
// operator administers and the credential endpoint machines fetch their
// workload's credentials from once they have attested.
type AttestationOptions struct {
	// AdminSocket is the SPIRE server's admin API socket; TrustDomain its
	// trust domain. Both set: the credential endpoint runs, with an SVID
	// minted on that server.
	AdminSocket, TrustDomain string
	// AllowedAdminSockets are further admin sockets templates may name.
	AllowedAdminSockets []string
	// ServerAddress and AdminCredentials reach the server's admin API over
	// TCP instead: host:port, and a Secret in the operator's namespace with
	// the admin SVID (tls.crt, tls.key) and the trust bundle (bundle.crt).
	ServerAddress, AdminCredentials string
	// EndpointAddr is the credential endpoint's listen address; "0" turns
	// it off.
	EndpointAddr string
	// EndpointURL is the endpoint as machines reach it (https://host:port).
	EndpointURL string
	// Selectors match the machines' bootstrap agent to its entry.
	Selectors []string
	// AgentPath is hyperfleet-bootstrap's path on machines.
	AgentPath string
	// Dial replaces the SPIRE admin connection (tests give the fake).
	Dial func(socket, trustDomain, installation string) (spire.Server, error)
	// StandbyWait is how long the endpoint holds a standby machine's
	// request for a claim to take it (20 s when zero; tests shorten it).
	StandbyWait time.Duration
}

func (o *AttestationOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.AdminSocket, "spire-admin-socket", "", "The SPIRE server's admin API socket (mounted into the operator's Pod), for templates with spec.attestation; a template's spec.attestation.spire.adminSocketPath wins when --spire-allowed-admin-socket lists it. Empty: attesting templates stall, saying what to configure.")
	fs.Func("spire-allowed-admin-socket", "Another SPIRE server admin socket (mounted into the operator's Pod) that templates may name in spec.attestation.spire.adminSocketPath; repeat for more. A template naming any other path is refused.", func(s string) error {
		o.AllowedAdminSockets = append(o.AllowedAdminSockets, s)
		return nil
	})
	fs.StringVar(&o.ServerAddress, "spire-server-address", "", "The SPIRE server's TCP endpoint (host:port), reached as an admin workload with --spire-admin-credentials, where its admin socket cannot be mounted.")
	fs.StringVar(&o.AdminCredentials, "spire-admin-credentials", "", "A Secret in the operator's namespace with an X509-SVID the server lists in admin_ids (keys tls.crt, tls.key) and the trust bundle (bundle.crt), e.g. synced by an ExternalSecret; re-read when it changes.")
	fs.StringVar(&o.TrustDomain, "spire-trust-domain", "", "The trust domain of --spire-admin-socket's server: the credential endpoint's SVID is minted there, and it accepts machines of that trust domain only.")
	fs.StringVar(&o.EndpointAddr, "credential-endpoint-bind-address", ":9444", "Address of the credential endpoint (mTLS, SPIFFE SVIDs), where attested machines fetch their workload's credentials once; 0 turns it off.")
	fs.StringVar(&o.EndpointURL, "credential-endpoint-url", "", "The credential endpoint as machines reach it, e.g. https://hyperfleet-credentials.hyperfleet-system.svc:9444 or a LoadBalancer's address. Required for attestation.")
	fs.Func("spire-workload-selector", "A selector (type:value) of the bootstrap agent's workload entry on every attested machine; repeat for more. Default: unix:uid:0 (the agent runs as root).", func(s string) error {
		o.Selectors = append(o.Selectors, s)
		return nil
	})
	fs.StringVar(&o.AgentPath, "machine-agent-path", attestation.DefaultAgentPath, "Path of hyperfleet-bootstrap on machines whose workload is none: it attests and keeps the machine's identity.")
}

// selectors are the configured ones, or unix:uid:0.
func (o *AttestationOptions) selectors() []string {
	if len(o.Selectors) == 0 {
		return []string{"unix:uid:0"}
	}
	return o.Selectors
}

func (o *AttestationOptions) complete() error {
	if _, err := attestation.ParseSelectors(o.selectors()); err != nil {
		return fmt.Errorf("--spire-workload-selector: %w", err)
	}
	if (o.ServerAddress == "") != (o.AdminCredentials == "") {
		return fmt.Errorf("--spire-server-address and --spire-admin-credentials go together")
	}
	if o.AdminSocket != "" && o.ServerAddress != "" {
		return fmt.Errorf("--spire-admin-socket and --spire-server-address are two ways to one server: choose one")
	}
	if (o.AdminSocket != "" || o.ServerAddress != "") != (o.TrustDomain != "") {
		return fmt.Errorf("--spire-trust-domain goes with --spire-admin-socket or --spire-server-address")
	}
	if o.EndpointURL != "" && !strings.HasPrefix(o.EndpointURL, "https://") {
		return fmt.Errorf("--credential-endpoint-url %q: want https://host:port", o.EndpointURL)
	}
	return nil
}

// configured: the operator administers a SPIRE server of its own.
func (o *AttestationOptions) configured() bool { return o.AdminSocket != "" || o.ServerAddress != "" }

// endpointEnabled: the operator can mint its serving SVID and serve.
func (o *AttestationOptions) endpointEnabled() bool {
	return o.configured() && o.EndpointAddr != "" && o.EndpointAddr != "0"
}

var registerAttestationMetrics sync.Once

// setupAttestation returns the registry every attesting claim uses, and
// starts the credential endpoint on every replica (not only the leader:
// machines reach whichever the Service picks, and a hand-out is recorded
// with an optimistic lock).
func setupAttestation(mgr ctrl.Manager, o Options, creds *credentials.Reader) (*attestation.Registry, error) {
	ao := o.Attestation
	// Registered with or without SPIRE, so the alert on refused requests
	// always has its series to read.
	registerAttestationMetrics.Do(func() { metrics.Registry.MustRegister(attestation.Metrics()...) })
	selectors, err := attestation.ParseSelectors(ao.selectors())
	if err != nil {
		return nil, err
	}
	reg := &attestation.Registry{Installation: o.InstallationID, AdminSocket: ao.AdminSocket, AllowedAdminSockets: ao.AllowedAdminSockets, Selectors: selectors, AgentPath: ao.AgentPath}
	if ao.Dial != nil {
		reg.Dial = ao.Dial
	}
	if ao.ServerAddress != "" {
		admin := &adminDialer{creds: creds, secret: types.NamespacedName{Namespace: o.OperatorNamespace, Name: ao.AdminCredentials},
			address: ao.ServerAddress, trustDomain: ao.TrustDomain, installation: o.InstallationID}
		reg.DialAdmin = admin.dial
	}
	if ao.configured() {
		sw := &attestation.Sweeper{Registry: reg, Reader: mgr.GetClient(), TrustDomain: ao.TrustDomain,
			Interval: cmp.Or(o.OrphanSweepInterval, time.Minute), Grace: cmp.Or(o.OrphanGrace, 10*time.Minute)}
		if err := mgr.Add(sw); err != nil {
			return nil, err
		}
	}
	if !ao.endpointEnabled() {
		return reg, nil
	}
	reg.EndpointURL, reg.EndpointTrustDomain = strings.TrimSuffix(ao.EndpointURL, "/"), ao.TrustDomain
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &hypervisorv1alpha1.MachineClaim{}, attestation.SPIFFEIDIndex, attestation.IndexSPIFFEID); err != nil {
		return nil, err
	}
	ep := &attestation.Endpoint{Installation: o.InstallationID, Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Credentials: creds,
		Recorder: mgr.GetEventRecorder("credential-endpoint"), Cache: mgr.GetCache(), StandbyWait: ao.StandbyWait}
	if o.MachineClaimClock != nil {
		// The claims' deadlines and the endpoint's are told by one clock.
		ep.Now = o.MachineClaimClock.Now
	}
	return reg, mgr.Add(everyReplica(func(ctx context.Context) error {
		log := ctrl.LoggerFrom(ctx).WithName("credential-endpoint")
		server, err := reg.Server(ctx, &hypervisorv1alpha1.SPIREConfig{TrustDomain: ao.TrustDomain})
		if err != nil {
			return err
		}
		// SPIRE may be down when the operator starts: the endpoint waits
		// for its first SVID instead of failing the manager.
		var id *attestation.Identity
		for {
			if id, err = attestation.NewIdentity(ctx, server, ao.TrustDomain, o.InstallationID); err == nil {
				break
			}
			log.Error(err, "The credential endpoint has no SVID yet; retrying in 5s")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Second):
			}
		}
		go id.Run(ctx, log)
		log.Info("Serving the credential endpoint", "address", ao.EndpointAddr, "spiffeID", id.ID().String())
		return ep.Serve(ctx, ao.EndpointAddr, id)
	}))
}

// everyReplica is a runnable that runs on every replica, leader or not.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

// adminDialer reaches the operator's SPIRE server over TCP with the admin
// SVID of a Secret, dialling again when the Secret's content changes (a
// rotation by the secret store).
type adminDialer struct {
	creds                              *credentials.Reader
	secret                             types.NamespacedName
	address, trustDomain, installation string

	mu          sync.Mutex
	fingerprint [sha256.Size]byte
	client      *spire.Client
}

func (d *adminDialer) dial(ctx context.Context, trustDomain string) (spire.Server, error) {
	if trustDomain != d.trustDomain {
		return nil, fmt.Errorf("%w: the operator administers trust domain %s (--spire-trust-domain) over TCP, not %s; set spec.attestation.spire.adminSocketPath for another server", attestation.ErrNotConfigured, d.trustDomain, trustDomain)
	}
	secret, err := d.creds.OperatorSecret(ctx, d.secret, "--spire-admin-credentials")
	if err != nil {
		return nil, err
	}
	keys := []string{"tls.crt", "tls.key", "bundle.crt"}
	h := sha256.New()
	for _, k := range keys {
		if len(secret.Data[k]) == 0 {
			return nil, fmt.Errorf("%w: Secret %s (--spire-admin-credentials) has no %s", attestation.ErrNotConfigured, d.secret, k)
		}
		h.Write(secret.Data[k])
	}
	var fp [sha256.Size]byte
	copy(fp[:], h.Sum(nil))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client != nil && fp == d.fingerprint {
		return d.client, nil
	}
	c, err := spire.DialTLS(d.address, spire.AdminCredentials{CertPEM: secret.Data["tls.crt"], KeyPEM: secret.Data["tls.key"], BundlePEM: secret.Data["bundle.crt"]},
		d.trustDomain, d.installation)
	if err != nil {
		return nil, fmt.Errorf("%w: Secret %s (--spire-admin-credentials): %w", attestation.ErrNotConfigured, d.secret, err)
	}
	if d.client != nil {
		_ = d.client.Close()
	}
	d.client, d.fingerprint = c, fp
	return c, nil
}
