package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/hyperfleet/hyperfleet/internal/manager"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// Every way the manager gets its config gives the same client: no
// client-side rate limit, fairness left to the API server. `--kubeconfig F`
// once built it with client-go's bare 5 requests a second; the sandbox's
// envtest config carries 1000. restConfig serves the first two paths;
// manager.New applies manager.ClientConfig to whatever it is given, which
// is how the in-cluster config (through restConfig too) and the sandbox's
// (straight to manager.New) get it.
func TestEveryPathGetsTheSameClient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	byFlag, err := restConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	byVariable, err := restConfig("")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]*rest.Config{
		"--kubeconfig": byFlag,
		"KUBECONFIG":   byVariable,
		// What rest.InClusterConfig returns (it reads a token file at a fixed
		// path, so it cannot run here): the host from the service variables,
		// a token file, the cluster CA, and QPS 0, which means 5 a second.
		"in-cluster": manager.ClientConfig(&rest.Config{Host: "https://10.96.0.1:443", BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token",
			TLSClientConfig: rest.TLSClientConfig{CAFile: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}}),
		// The sandbox's: envtest's admin config.
		"sandbox": manager.ClientConfig(&rest.Config{Host: "https://127.0.0.1:6443", QPS: 1000, Burst: 2000}),
		// A caller's own limiter is dropped too.
		"a config with a limiter": manager.ClientConfig(&rest.Config{Host: "https://127.0.0.1:6443", QPS: 5, Burst: 10,
			RateLimiter: flowcontrol.NewTokenBucketRateLimiter(5, 10)}),
	}
	for name, cfg := range paths {
		if cfg.QPS != -1 || cfg.Burst != 0 || cfg.RateLimiter != nil {
			t.Errorf("%s: QPS %v, burst %d, limiter %v; want no client-side limit (QPS -1)", name, cfg.QPS, cfg.Burst, cfg.RateLimiter)
		}
	}
	if byFlag.Host != byVariable.Host || byFlag.UserAgent != byVariable.UserAgent {
		t.Errorf("--kubeconfig: host %s agent %q; KUBECONFIG: host %s agent %q", byFlag.Host, byFlag.UserAgent, byVariable.Host, byVariable.UserAgent)
	}
	// And a client built from it has no limiter: client-go makes one only
	// for a positive QPS.
	rc, err := rest.RESTClientFor(withCodec(byFlag))
	if err != nil {
		t.Fatal(err)
	}
	if rc.GetRateLimiter() != nil {
		t.Errorf("the REST client has a rate limiter: %v", rc.GetRateLimiter())
	}
}

func withCodec(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	return cfg
}

// --gc-percent applies unless GOGC is set, which always wins.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if _, set := os.LookupEnv("GOGC"); set {
		t.Fatal("run the tests without GOGC in the environment")
	}
	if got := setGCPercent(40); got != 40 || debug.SetGCPercent(40) != 40 {
		t.Errorf("setGCPercent(40) = %d, want 40 in effect", got)
	}
	t.Setenv("GOGC", "80")
	debug.SetGCPercent(80) // as the runtime does from GOGC at start
	if got := setGCPercent(40); got != 80 || debug.SetGCPercent(80) != 80 {
		t.Errorf("with GOGC=80, setGCPercent(40) = %d, want GOGC's 80 kept", got)
	}
}
