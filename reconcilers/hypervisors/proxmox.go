package hypervisors

import (
	"fmt"
	"strings"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/providers/proxmox"
)

// Keys of a Proxmox credentials Secret.
const (
	KeyTokenID     = "tokenID"
	KeyTokenSecret = "tokenSecret"
	KeyUsername    = "username"
	KeyPassword    = "password"
)

// Proxmox returns the factory of Proxmox VE providers for installation (the
// operator's --installation-id): its VMs carry the id, and it touches no
// other installation's.
func Proxmox(installation string) Factory {
	return func(cluster *hypervisorv1alpha1.HypervisorCluster, creds Credentials) (providers.Hypervisor, error) {
		return newProxmox(cluster, creds, installation)
	}
}

func newProxmox(cluster *hypervisorv1alpha1.HypervisorCluster, creds Credentials, installation string) (providers.Hypervisor, error) {
	spec := cluster.Spec
	cfg := proxmox.Config{
		Installation: installation,
		Endpoint:     spec.Endpoint,
		TokenID:      strings.TrimSpace(string(creds.Data[KeyTokenID])),
		TokenSecret:  strings.TrimSpace(string(creds.Data[KeyTokenSecret])),
		Username:     strings.TrimSpace(string(creds.Data[KeyUsername])),
		Password:     string(creds.Data[KeyPassword]),
		CAPEM:        creds.CA,
	}
	if cfg.TokenID == "" && cfg.Username == "" {
		return nil, providers.Permanent("CredentialsIncomplete", fmt.Sprintf(
			"Secret %s (spec.credentialsRef) needs the keys %s and %s (an API token), or %s and %s",
			spec.CredentialsRef.Name, KeyTokenID, KeyTokenSecret, KeyUsername, KeyPassword), nil)
	}
	if tls := spec.TLS; tls != nil {
		cfg.ServerName = tls.ServerName
		cfg.InsecureSkipVerify = tls.InsecureSkipVerify
	}
	if px := spec.Proxmox; px != nil {
		cfg.Nodes = px.Nodes
		cfg.DefaultStorage = px.DefaultStorage
		cfg.DefaultBridge = px.DefaultBridge
		cfg.Tags = px.Tags
		cfg.CloudInitStorage = px.CloudInitStorage
		cfg.MaxClonesPerNode = int(px.MaxConcurrentClonesPerNode)
		cfg.MaxClonesPerStorage = int(px.MaxConcurrentClonesPerStorage)
		if px.DNS != nil {
			cfg.Nameservers = px.DNS.Nameservers
			cfg.SearchDomain = px.DNS.SearchDomain
		}
		if px.TaskTimeout != nil {
			cfg.TaskTimeout = px.TaskTimeout.Duration
		}
	}
	return proxmox.New(cfg)
}
