package github_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/hyperfleet/hyperfleet/internal/sim/githubsim"
	"github.com/hyperfleet/hyperfleet/providers/github"
)

func TestConfigFromSecret(t *testing.T) {
	pemKey := "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n"
	cases := []struct {
		name    string
		data    map[string][]byte
		want    github.Config
		reason  string
		secrets []string
	}{
		{"app", map[string][]byte{"appID": []byte("123\n"), "installationID": []byte(" 456"), "privateKey": []byte(pemKey)},
			github.Config{AppID: 123, InstallationID: 456, PrivateKeyPEM: []byte(pemKey)}, "", nil},
		{"app, actions-runner-controller keys", map[string][]byte{"github_app_id": []byte("1"), "github_app_installation_id": []byte("2"), "github_app_private_key": []byte(pemKey)},
			github.Config{AppID: 1, InstallationID: 2, PrivateKeyPEM: []byte(pemKey)}, "", nil},
		{"token", map[string][]byte{"token": []byte("ghp_abc\n")}, github.Config{Token: "ghp_abc"}, "", nil},
		{"token, actions-runner-controller key", map[string][]byte{"github_token": []byte("ghp_abc")}, github.Config{Token: "ghp_abc"}, "", nil},
		{"both: the App wins", map[string][]byte{"appID": []byte("1"), "installationID": []byte("2"), "privateKey": []byte(pemKey), "token": []byte("ghp_abc")},
			github.Config{AppID: 1, InstallationID: 2, PrivateKeyPEM: []byte(pemKey)}, "", nil},
		{"empty", map[string][]byte{}, github.Config{}, "CredentialsIncomplete", nil},
		{"app without key", map[string][]byte{"appID": []byte("1"), "installationID": []byte("2")}, github.Config{}, "CredentialsIncomplete", nil},
		{"key without installation", map[string][]byte{"appID": []byte("1"), "privateKey": []byte(pemKey)}, github.Config{}, "CredentialsIncomplete", []string{"MIIB"}},
		{"non-numeric app ID", map[string][]byte{"appID": []byte("my-app-s3cr3t"), "installationID": []byte("2"), "privateKey": []byte(pemKey)},
			github.Config{}, "InvalidCredentials", []string{"my-app-s3cr3t", "MIIB"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := github.ConfigFromSecret(tc.data)
			if tc.reason != "" {
				msg := wantPermanent(t, err, tc.reason)
				noSecrets(t, err.Error()+msg, tc.secrets...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.AppID != tc.want.AppID || got.InstallationID != tc.want.InstallationID || string(got.PrivateKeyPEM) != string(tc.want.PrivateKeyPEM) || got.Token != tc.want.Token {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

// The fingerprint is stable for equal configs and changes with anything that
// changes the client; it never contains a secret.
func TestFingerprint(t *testing.T) {
	base := github.Config{BaseURL: "https://ghe.example.com/api/v3/", AppID: 1, InstallationID: 2, PrivateKeyPEM: []byte("KEY-MATERIAL")}
	same := base
	same.BaseURL = "https://ghe.example.com/api/v3" // the trailing slash is not a difference
	same.RateLimiter = github.NewRateLimiter(github.RateLimiterOptions{})
	if base.Fingerprint() != same.Fingerprint() {
		t.Fatal("equal configs must have equal fingerprints")
	}
	changes := map[string]func(*github.Config){
		"key":          func(c *github.Config) { c.PrivateKeyPEM = []byte("OTHER-KEY") },
		"installation": func(c *github.Config) { c.InstallationID = 3 },
		"app":          func(c *github.Config) { c.AppID = 9 },
		"URL":          func(c *github.Config) { c.BaseURL = "" },
		"timeout":      func(c *github.Config) { c.Timeout = time.Second },
		"token":        func(c *github.Config) { *c = github.Config{Token: "ghp_x"} },
	}
	seen := map[string]string{base.Fingerprint(): "base"}
	for name, change := range changes {
		c := base
		change(&c)
		fp := c.Fingerprint()
		if prev, dup := seen[fp]; dup {
			t.Errorf("changing %s gives the fingerprint of %s", name, prev)
		}
		seen[fp] = name
		noSecrets(t, fp, "KEY-MATERIAL", "ghp_x")
	}
	// A zero timeout is the default one.
	explicit := base
	explicit.Timeout = github.DefaultTimeout
	if explicit.Fingerprint() != base.Fingerprint() {
		t.Error("Timeout 0 and DefaultTimeout build the same client")
	}
}

// A Config printed by accident shows no secret.
func TestConfigPrintsRedacted(t *testing.T) {
	cfg := github.Config{AppID: 1, InstallationID: 2, PrivateKeyPEM: []byte("KEY-MATERIAL"), Token: "ghp_secret"}
	for _, text := range []string{fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%v", &cfg)} {
		noSecrets(t, text, "KEY-MATERIAL", "ghp_secret")
		if !strings.Contains(text, "[redacted]") {
			t.Errorf("%q does not say the secrets were redacted", text)
		}
	}
}

// The private key may come base64-encoded, as some secret stores keep it.
func TestBase64PrivateKey(t *testing.T) {
	sim := startSim(t, githubsim.Options{})
	cfg := appConfig(sim)
	cfg.PrivateKeyPEM = []byte(base64.StdEncoding.EncodeToString(cfg.PrivateKeyPEM))
	if _, err := newClient(t, cfg).ListRunners(ctxT(t), repoScope); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeJITConfigForms(t *testing.T) {
	enc := func(runner string) string {
		files, _ := json.Marshal(map[string]string{".runner": base64.StdEncoding.EncodeToString([]byte(runner)), ".credentials": "e30="})
		return base64.StdEncoding.EncodeToString(files)
	}
	camel := `{"agentId": 42, "agentName": "r1", "poolId": 1, "poolName": "Default", "gitHubUrl": "https://github.com/o/r", "workFolder": "_work", "ephemeral": true}`
	pascal := "\ufeff" + `{"AgentId": "42", "AgentName": "r1", "PoolId": "1", "PoolName": "Default", "GitHubUrl": "https://github.com/o/r", "WorkFolder": "_work", "Ephemeral": "True"}`
	for name, in := range map[string]string{"camelCase numbers": enc(camel), "PascalCase strings with BOM": enc(pascal)} {
		info, err := github.DecodeJITConfig(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if info.RunnerID != 42 || info.RunnerName != "r1" || info.PoolID != 1 || !info.Ephemeral || info.GitHubURL != "https://github.com/o/r" {
			t.Fatalf("%s: %+v", name, info)
		}
	}
	secret := "c3VwZXItc2VjcmV0LWNyZWRlbnRpYWw"
	for _, bad := range []string{"", "!!!", base64.StdEncoding.EncodeToString([]byte("[1]")), enc(`{"agentName":"x"}`), enc("not json " + secret), secret} {
		_, err := github.DecodeJITConfig(bad)
		if err == nil {
			t.Fatalf("%q decoded", bad)
		}
		noSecrets(t, err.Error(), secret)
	}
}

func FuzzDecodeJITConfig(f *testing.F) {
	runner := base64.StdEncoding.EncodeToString([]byte(`{"AgentId":"7","AgentName":"n","Ephemeral":"True"}`))
	files, _ := json.Marshal(map[string]string{".runner": runner})
	f.Add(base64.StdEncoding.EncodeToString(files))
	f.Add("")
	f.Add("eyIucnVubmVyIjoiIn0=")
	f.Add(strings.Repeat("A", 100))
	f.Fuzz(func(t *testing.T, in string) {
		info, err := github.DecodeJITConfig(in)
		if err != nil {
			if len(in) > 8 && strings.Contains(err.Error(), in) {
				t.Fatalf("the error quotes the input: %v", err)
			}
			return
		}
		if info.RunnerID <= 0 || info.RunnerName == "" {
			t.Fatalf("decoded a config naming no runner: %+v", info)
		}
	})
}

func FuzzConfigFromSecret(f *testing.F) {
	f.Add("123", "456", "-----BEGIN RSA PRIVATE KEY-----", "")
	f.Add("", "", "", "ghp_x")
	f.Add("-1", "0x10", "k", "t")
	f.Fuzz(func(t *testing.T, appID, installationID, key, token string) {
		data := map[string][]byte{"appID": []byte(appID), "installationID": []byte(installationID), "privateKey": []byte(key), "token": []byte(token)}
		cfg, err := github.ConfigFromSecret(data)
		if err != nil {
			for _, s := range []string{appID, installationID, key, token} {
				if len(strings.TrimSpace(s)) > 6 && strings.Contains(err.Error(), s) {
					t.Fatalf("the error quotes a value: %v", err)
				}
			}
			return
		}
		if cfg.Kind() == "" {
			t.Fatalf("accepted credentials of no kind: %+v", cfg)
		}
		_ = cfg.Fingerprint()
	})
}

// Requests are counted by operation and status; the remaining budget is a gauge.
func TestMetrics(t *testing.T) {
	sim := startSim(t, githubsim.Options{RateLimit: 1000})
	c := newClient(t, appConfig(sim))
	before := counter(t, "create_installation_token", "201")
	if _, err := c.ListRunners(ctxT(t), orgScope); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteRunner(ctxT(t), orgScope, 999); err != nil {
		t.Fatal(err)
	}
	if got := counter(t, "create_installation_token", "201") - before; got != 1 {
		t.Errorf("create_installation_token 201 grew by %v", got)
	}
	if counter(t, "list_runners", "200") < 1 || counter(t, "delete_runner", "404") < 1 {
		t.Error("list_runners 200 and delete_runner 404 must be counted")
	}
	if v, ok := gauge(t, "hyperfleet_github_rate_limit_remaining", "resource", "core"); !ok || v > 1000 {
		t.Errorf("remaining gauge = %v, %v", v, ok)
	}
}

func counter(t *testing.T, op, code string) float64 {
	t.Helper()
	for _, m := range family(t, "hyperfleet_github_api_requests_total") {
		if label(m, "operation") == op && label(m, "code") == code {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func gauge(t *testing.T, name, key, value string) (float64, bool) {
	t.Helper()
	for _, m := range family(t, name) {
		if label(m, key) == value {
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func family(t *testing.T, name string) []*dto.Metric {
	t.Helper()
	fams, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
