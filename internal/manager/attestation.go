package manager

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

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
}

func (o *AttestationOptions) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.AdminSocket, "spire-admin-socket", "", "The SPIRE server's admin API socket (mounted into the operator's Pod), for templates with spec.attestation; a template's spec.attestation.spire.adminSocketPath wins. Empty: attesting templates stall, saying what to configure.")
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
	if (o.AdminSocket == "") != (o.TrustDomain == "") {
		return fmt.Errorf("--spire-admin-socket and --spire-trust-domain go together")
	}
	if o.EndpointURL != "" && !strings.HasPrefix(o.EndpointURL, "https://") {
		return fmt.Errorf("--credential-endpoint-url %q: want https://host:port", o.EndpointURL)
	}
	return nil
}

// endpointEnabled: the operator can mint its serving SVID and serve.
func (o *AttestationOptions) endpointEnabled() bool {
	return o.AdminSocket != "" && o.EndpointAddr != "" && o.EndpointAddr != "0"
}

var registerAttestationMetrics sync.Once

// setupAttestation returns the registry every attesting claim uses, and
// starts the credential endpoint on every replica (not only the leader:
// machines reach whichever the Service picks, and a hand-out is recorded
// with an optimistic lock).
func setupAttestation(mgr ctrl.Manager, o Options, creds *credentials.Reader) (*attestation.Registry, error) {
	ao := o.Attestation
	selectors, err := attestation.ParseSelectors(ao.selectors())
	if err != nil {
		return nil, err
	}
	reg := &attestation.Registry{Installation: o.InstallationID, AdminSocket: ao.AdminSocket, Selectors: selectors, AgentPath: ao.AgentPath}
	if ao.Dial != nil {
		reg.Dial = ao.Dial
	}
	if ao.AdminSocket != "" {
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
	registerAttestationMetrics.Do(func() { metrics.Registry.MustRegister(attestation.Metrics()...) })
	ep := &attestation.Endpoint{Registry: reg, Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Credentials: creds,
		Recorder: mgr.GetEventRecorder("credential-endpoint")}
	if o.MachineClaimClock != nil {
		// The claims' deadlines and the endpoint's are told by one clock.
		ep.Now = o.MachineClaimClock.Now
	}
	return reg, mgr.Add(everyReplica(func(ctx context.Context) error {
		log := ctrl.LoggerFrom(ctx).WithName("credential-endpoint")
		server, err := reg.Server(&hypervisorv1alpha1.SPIREConfig{TrustDomain: ao.TrustDomain})
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
