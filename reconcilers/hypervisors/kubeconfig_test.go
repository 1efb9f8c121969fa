package hypervisors

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// A kubeconfig is tenant input: only inline credentials are taken, and a
// refusal names the field.
func TestKubeconfigInlineOnly(t *testing.T) {
	const head = `apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
`
	cluster := func(extra string) string {
		return "clusters:\n- name: k\n  cluster:\n    server: https://remote.example:6443\n" + extra
	}
	user := func(fields string) string { return "users:\n- name: u\n  user:\n" + fields }
	for _, tc := range []struct {
		name, kubeconfig, field string
	}{
		{"token file", head + cluster("") + user("    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"), "users[u].user.tokenFile"},
		{"client certificate file", head + cluster("") + user("    client-certificate: /etc/hyperfleet/tls.crt\n    client-key-data: eA==\n"), "users[u].user.client-certificate"},
		{"client key file", head + cluster("") + user("    client-certificate-data: eA==\n    client-key: /etc/hyperfleet/tls.key\n"), "users[u].user.client-key"},
		{"exec", head + cluster("") + user("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, 'cat /etc/passwd']\n      interactiveMode: Never\n"), "users[u].user.exec"},
		{"auth provider", head + cluster("") + user("    auth-provider:\n      name: oidc\n      config: {idp-issuer-url: https://x}\n"), "users[u].user.auth-provider"},
		{"impersonation", head + cluster("") + user("    token: t\n    as: system:admin\n"), "users[u].user.as"},
		{"CA file", head + cluster("    certificate-authority: /etc/ssl/private/ca.pem\n") + user("    token: t\n"), "clusters[k].cluster.certificate-authority"},
		{"proxy", head + cluster("    proxy-url: http://attacker.example:3128\n") + user("    token: t\n"), "clusters[k].cluster.proxy-url"},
		{"plain http", head + "clusters:\n- name: k\n  cluster:\n    server: http://remote.example:6443\n" + user("    token: t\n"), "clusters[k].cluster.server"},
		{"unknown context", strings.Replace(head, "current-context: c", "current-context: other", 1) + cluster("") + user("    token: t\n"), "current-context"},
		{"not a kubeconfig", "clusters: [this is not", "kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RESTConfigFromInlineKubeconfig([]byte(tc.kubeconfig))
			var ke *KubeconfigError
			if !errors.As(err, &ke) {
				t.Fatalf("want a KubeconfigError naming %s, got %v", tc.field, err)
			}
			if ke.Field != tc.field {
				t.Errorf("refusal names %q, want %q (%v)", ke.Field, tc.field, err)
			}
		})
	}

	cfg, err := RESTConfigFromInlineKubeconfig([]byte(head + cluster("    certificate-authority-data: Y2E=\n    tls-server-name: api\n") +
		user("    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n    token: secret-token\n")))
	if err != nil {
		t.Fatalf("inline kubeconfig refused: %v", err)
	}
	if cfg.Host != "https://remote.example:6443" || string(cfg.CAData) != "ca" || cfg.ServerName != "api" ||
		string(cfg.CertData) != "cert" || string(cfg.KeyData) != "key" || cfg.BearerToken != "secret-token" {
		t.Errorf("inline fields not carried over: %+v", cfg)
	}
	if cfg.Timeout != RemoteTimeout {
		t.Errorf("remote requests need a deadline: Timeout = %v", cfg.Timeout)
	}
	if cfg.BearerTokenFile != "" || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.ExecProvider != nil || cfg.AuthProvider != nil {
		t.Errorf("a file or plugin reached the client configuration: %+v", cfg)
	}
}

// A remote cluster at the cloud metadata address is never contacted: the
// client's dialer refuses link-local addresses, naming the address.
func TestKubeconfigServerAtMetadataAddressIsRefused(t *testing.T) {
	cfg, err := RESTConfigFromInlineKubeconfig([]byte(`apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u}
clusters:
- name: k
  cluster: {server: "https://169.254.169.254:443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: t}
`))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.Discovery().ServerVersion()
	if err == nil || !strings.Contains(err.Error(), "refusing to connect to 169.254.169.254:443") {
		t.Errorf("a request to the metadata address: %v, want the dialer's refusal", err)
	}
}
