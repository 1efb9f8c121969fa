// Package proxmox is the Proxmox VE provider: linked or full clones of a
// template VM through github.com/luthermonson/go-proxmox, configured through
// Proxmox's cloud-init fields, owned through tags and the description.
package proxmox

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// Config is everything the provider needs from a HypervisorCluster and its Secret.
type Config struct {
	// Endpoint is the API base, e.g. https://pve:8006/api2/json.
	Endpoint string
	// TokenID ("user@realm!name") and TokenSecret: API-token auth, preferred.
	TokenID, TokenSecret string
	// Username ("user@realm") and Password: ticket auth.
	Username, Password string
	// CAPEM holds the CAs that sign the API certificate; empty uses the system roots.
	CAPEM []byte
	// ServerName overrides the name the certificate is checked against.
	ServerName string
	// InsecureSkipVerify turns verification off; only when the user set it explicitly.
	InsecureSkipVerify bool
	// RequestTimeout bounds one API request, body included
	// (providers.DefaultRequestTimeout when zero).
	RequestTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an answer once a request
	// is sent (providers.DefaultResponseHeaderTimeout when zero), so an
	// endpoint that accepts and never answers is named as timed out.
	ResponseHeaderTimeout time.Duration
	// MaxResponseBytes bounds one response body (MaxResponseBytes when zero).
	MaxResponseBytes int64

	// Nodes limits placement; empty allows every online node.
	Nodes []string
	// DefaultStorage, DefaultBridge apply when a template names none.
	DefaultStorage, DefaultBridge string
	// Nameservers and SearchDomain are cloud-init DNS defaults.
	Nameservers  []string
	SearchDomain string
	// Tags are added to every VM.
	Tags []string
	// CloudInitStorage receives per-machine cloud-init ISOs (iso content); default "local".
	CloudInitStorage string
	// MaxClonesPerNode and MaxClonesPerStorage cap concurrent clones.
	MaxClonesPerNode, MaxClonesPerStorage int
	// TaskTimeout bounds how long a clone, resize or start task may run.
	TaskTimeout time.Duration
	// TaskPollInterval is how often a node with tasks of ours running has
	// its task list read (one request per node, whatever the number of
	// tasks): the most a machine waits past its task's end. While clones
	// queue for a slot the list is read twice as often.
	TaskPollInterval time.Duration
	// Installation is this installation's id: written on every VM (a tag and
	// a description line) and into cloud-init ISO names, and required of
	// every VM the provider lists or touches.
	Installation string
}

func (c *Config) setDefaults() {
	if c.RequestTimeout == 0 {
		c.RequestTimeout = providers.DefaultRequestTimeout
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = min(providers.DefaultResponseHeaderTimeout, c.RequestTimeout)
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = MaxResponseBytes
	}
	if c.CloudInitStorage == "" {
		c.CloudInitStorage = "local"
	}
	if c.MaxClonesPerNode == 0 {
		c.MaxClonesPerNode = 2
	}
	if c.MaxClonesPerStorage == 0 {
		c.MaxClonesPerStorage = 4
	}
	if c.TaskTimeout == 0 {
		c.TaskTimeout = 10 * time.Minute
	}
	if c.TaskPollInterval == 0 {
		c.TaskPollInterval = 200 * time.Millisecond
	}
}

func (c *Config) validate() error {
	switch {
	case c.Endpoint == "":
		return providers.Permanent("InvalidEndpoint", "the Proxmox endpoint is empty: set spec.endpoint", nil)
	case c.TokenID != "" && c.TokenSecret == "":
		return providers.Permanent("CredentialsIncomplete", "the credentials Secret has tokenID but no tokenSecret", nil)
	case c.TokenID == "" && (c.Username == "" || c.Password == ""):
		return providers.Permanent("CredentialsIncomplete", "the credentials Secret needs tokenID and tokenSecret, or username and password", nil)
	}
	if err := checkTenantTags("spec.proxmox.tags of the HypervisorCluster", c.Tags); err != nil {
		return err
	}
	if err := providers.ValidateInstallation(c.Installation); err != nil {
		return providers.Permanent("InvalidInstallation", err.Error()+": set the operator's --installation-id", nil)
	}
	return nil
}

// MaxResponseBytes bounds one Proxmox answer: /cluster/resources of 10,000
// VMs is about 4 MB, a task listing is capped by its limit; more than this
// is no Proxmox we know, and is refused rather than held in memory.
const MaxResponseBytes = 32 << 20

// newClient builds a go-proxmox client whose TLS is verified against the
// configured CA bundle and whose requests are counted and timed.
func newClient(cfg Config) (*proxmox.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if len(cfg.CAPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CAPEM) {
			return nil, providers.Permanent("InvalidCABundle", "the CA bundle holds no PEM certificate: check spec.tls.caBundleRef", nil)
		}
		tlsCfg.RootCAs = pool
	}
	// Verification is skipped only when the HypervisorCluster asks for it.
	tlsCfg.InsecureSkipVerify = cfg.InsecureSkipVerify
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           providers.Dialer().DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   providers.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
	}
	httpClient := &http.Client{
		Timeout: cfg.RequestTimeout,
		Transport: &providers.InstrumentedTransport{Provider: "proxmox", Operation: operation,
			Base: &providers.RedactingTransport{Base: &providers.BoundedTransport{Base: base, MaxBody: cfg.MaxResponseBytes}}},
	}
	opts := []proxmox.Option{proxmox.WithHTTPClient(httpClient), proxmox.WithUserAgent("hyperfleet")}
	if cfg.TokenID != "" {
		opts = append(opts, proxmox.WithAPIToken(cfg.TokenID, cfg.TokenSecret))
	} else {
		opts = append(opts, proxmox.WithCredentials(&proxmox.Credentials{Username: cfg.Username, Password: cfg.Password}))
	}
	return proxmox.NewClient(cfg.Endpoint, opts...), nil
}
