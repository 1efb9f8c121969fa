package metricsauth

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// serviceAccountToken makes a ServiceAccount in ns and returns a token the
// API server issued for it.
func serviceAccountToken(t *testing.T, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	c := testenv.Client()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// grant lets ns/name get path, as the Prometheus ClusterRole in the
// manifests does for /metrics.
func grant(t *testing.T, ns, name, path string) {
	t.Helper()
	ctx := context.Background()
	c := testenv.Client()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{path}, Verbs: []string{"get"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, binding); _ = c.Delete(ctx, role) })
}

func server(t *testing.T) *httptest.Server {
	t.Helper()
	cfg := testenv.Config()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	filter, err := Filter(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hyperfleet_up 1\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Only a token the API server accepts, for a user RBAC lets get the path,
// reads the metrics; the refusals say what to grant and never echo a token.
func TestOnlyAuthorizedScrapersReadMetrics(t *testing.T) {
	ns := testenv.Namespace(t)
	scraper := serviceAccountToken(t, ns, "prometheus")
	stranger := serviceAccountToken(t, ns, "stranger")
	grant(t, ns, "prometheus", "/metrics")
	s := server(t)

	for _, tc := range []struct {
		name, path, token string
		want              int
		says              string
	}{
		{"no token", "/metrics", "", http.StatusUnauthorized, "bearer token is required"},
		{"a token the API server never issued", "/metrics", "not-a-token", http.StatusUnauthorized, "does not accept the token"},
		{"a user without the grant", "/metrics", stranger, http.StatusForbidden, `grant nonResourceURLs "/metrics"`},
		{"the scraper", "/metrics", scraper, http.StatusOK, "hyperfleet_up 1"},
		{"the scraper again, from the cache", "/metrics", scraper, http.StatusOK, "hyperfleet_up 1"},
		{"the scraper on a path it was not granted", "/debug/pprof/heap", scraper, http.StatusForbidden, "may not get /debug/pprof/heap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, s.URL+tc.path, tc.token)
			if code != tc.want || !strings.Contains(body, tc.says) {
				t.Errorf("GET %s: %d %q, want %d saying %q", tc.path, code, body, tc.want, tc.says)
			}
			if tc.token != "" && strings.Contains(body, tc.token) {
				t.Error("the response echoes the token")
			}
		})
	}
}

// A refusal is remembered only for denyTTL: once RBAC grants the user,
// the next request after it passes.
func TestRefusalExpires(t *testing.T) {
	ns := testenv.Namespace(t)
	token := serviceAccountToken(t, ns, "late")
	cfg := testenv.Config()
	g := newGuard(authnclient.NewForConfigOrDie(cfg), authzclient.NewForConfigOrDie(cfg))
	now := time.Now()
	g.now = func() time.Time { return now }
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)

	if code, why := g.check(req); code != http.StatusForbidden {
		t.Fatalf("before the grant: %d %s, want 403", code, why)
	}
	grant(t, ns, "late", "/metrics")
	if code, _ := g.check(req); code != http.StatusForbidden {
		t.Fatalf("within %s of the refusal: %d, want the remembered 403", denyTTL, code)
	}
	now = now.Add(denyTTL + time.Second)
	// RBAC's authorizer reads its informers; the grant reaches them soon.
	// Each try is past the previous refusal's TTL.
	eventually.That(t, 30*time.Second, func() (bool, string) {
		now = now.Add(denyTTL + time.Second)
		code, why := g.check(req)
		return code == http.StatusOK, fmt.Sprintf("after the refusal expired and the grant: %d %s, want 200", code, why)
	})
}

// The cache holds at most cacheLimit decisions.
func TestCacheBounded(t *testing.T) {
	c := newCache()
	now := time.Now()
	for i := range 3 * cacheLimit {
		c.put(string(rune(i))+"k", decision{status: http.StatusOK}, now, time.Minute)
		if len(c.m) > cacheLimit {
			t.Fatalf("%d decisions held, limit %d", len(c.m), cacheLimit)
		}
	}
}
