package hypervisors

import (
	"fmt"
	"net/url"
	"sort"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hyperfleet/hyperfleet/providers"
)

// RemoteTimeout bounds every request to a remote KubeVirt cluster: a remote
// API server that accepts a connection and never answers costs its own
// cluster's objects a worker for this long, never the operator a worker for
// good.
const RemoteTimeout = providers.DefaultRequestTimeout

// KubeconfigError says which part of a tenant's kubeconfig was refused.
type KubeconfigError struct {
	// Field is the kubeconfig path, e.g. users[admin].user.tokenFile.
	Field string
	// Why says what is wrong and what to write instead.
	Why string
}

func (e *KubeconfigError) Error() string { return e.Field + ": " + e.Why }

// RESTConfigFromInlineKubeconfig turns a kubeconfig a tenant wrote into a
// client configuration, accepting inline credentials only.
//
// A kubeconfig is written by a tenant and read by the operator, which holds
// cluster-wide rights and its own ServiceAccount token on its disk. So
// nothing in it may make the operator touch its own machine or choose how it
// reaches the network: file paths of any kind (tokenFile, client-certificate,
// client-key, certificate-authority) would be read from the operator's
// filesystem and sent to a server the tenant chose; exec and auth providers
// would run programs or plugins inside the operator; a proxy-url would route
// the operator's traffic through a host the tenant chose. The configuration
// is built field by field from what was checked, never through clientcmd's
// loader, so a field added to kubeconfigs later is ignored rather than obeyed.
func RESTConfigFromInlineKubeconfig(data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		// clientcmd's decoding errors quote the input; the input is a
		// Secret's bytes, so only the fact is reported.
		return nil, &KubeconfigError{Field: "kubeconfig", Why: "is not a kubeconfig (YAML or JSON of kind Config)"}
	}
	ctxName := kc.CurrentContext
	if ctxName == "" && len(kc.Contexts) == 1 {
		for name := range kc.Contexts {
			ctxName = name
		}
	}
	if ctxName == "" {
		return nil, &KubeconfigError{Field: "current-context", Why: "must name one of the contexts (or the kubeconfig must have exactly one)"}
	}
	kctx, ok := kc.Contexts[ctxName]
	if !ok {
		return nil, &KubeconfigError{Field: "current-context", Why: fmt.Sprintf("names context %q, which the kubeconfig does not define", ctxName)}
	}
	cluster, ok := kc.Clusters[kctx.Cluster]
	if !ok {
		return nil, &KubeconfigError{Field: fmt.Sprintf("contexts[%s].context.cluster", ctxName), Why: fmt.Sprintf("names cluster %q, which the kubeconfig does not define", kctx.Cluster)}
	}
	if err := checkCluster(kctx.Cluster, cluster); err != nil {
		return nil, err
	}
	cfg := &rest.Config{
		Host:    cluster.Server,
		Timeout: RemoteTimeout,
		// The tenant chose the server: no link-local (metadata) address.
		Dial: providers.Dialer().DialContext,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:     cluster.CertificateAuthorityData,
			ServerName: cluster.TLSServerName,
			Insecure:   cluster.InsecureSkipTLSVerify,
		},
	}
	if kctx.AuthInfo == "" {
		return cfg, nil
	}
	user, ok := kc.AuthInfos[kctx.AuthInfo]
	if !ok {
		return nil, &KubeconfigError{Field: fmt.Sprintf("contexts[%s].context.user", ctxName), Why: fmt.Sprintf("names user %q, which the kubeconfig does not define", kctx.AuthInfo)}
	}
	if err := checkUser(kctx.AuthInfo, user); err != nil {
		return nil, err
	}
	cfg.BearerToken = user.Token
	cfg.Username, cfg.Password = user.Username, user.Password
	cfg.CertData, cfg.KeyData = user.ClientCertificateData, user.ClientKeyData
	return cfg, nil
}

func checkCluster(name string, c *clientcmdapi.Cluster) error {
	field := func(f string) string { return fmt.Sprintf("clusters[%s].cluster.%s", name, f) }
	u, err := url.Parse(c.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		// Plain http would send the credentials below in the clear.
		return &KubeconfigError{Field: field("server"), Why: "must be an https:// URL of the remote API server"}
	}
	if c.CertificateAuthority != "" {
		return &KubeconfigError{Field: field("certificate-authority"), Why: "is a file path, which the operator never reads: put the PEM in certificate-authority-data instead"}
	}
	if c.ProxyURL != "" {
		return &KubeconfigError{Field: field("proxy-url"), Why: "is not allowed: the operator's proxy is set by its administrator (HTTPS_PROXY), not per cluster"}
	}
	return nil
}

func checkUser(name string, u *clientcmdapi.AuthInfo) error {
	field := func(f string) string { return fmt.Sprintf("users[%s].user.%s", name, f) }
	refused := map[string]string{}
	if u.TokenFile != "" {
		refused[field("tokenFile")] = "is a file path, which the operator never reads: put the token in token instead"
	}
	if u.ClientCertificate != "" {
		refused[field("client-certificate")] = "is a file path, which the operator never reads: use client-certificate-data"
	}
	if u.ClientKey != "" {
		refused[field("client-key")] = "is a file path, which the operator never reads: use client-key-data"
	}
	if u.Exec != nil {
		refused[field("exec")] = "would run a program inside the operator: use a token or client-certificate-data and client-key-data"
	}
	if u.AuthProvider != nil {
		refused[field("auth-provider")] = "would run an authentication plugin inside the operator: use a token or client-certificate-data and client-key-data"
	}
	if u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0 {
		refused[field("as")] = "impersonation is not allowed: give the kubeconfig the credentials of the identity that should act"
	}
	if len(refused) == 0 {
		return nil
	}
	// One field at a time, the same one every time: a condition that does
	// not change between reconciles.
	fields := make([]string, 0, len(refused))
	for f := range refused {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	return &KubeconfigError{Field: fields[0], Why: refused[fields[0]]}
}
