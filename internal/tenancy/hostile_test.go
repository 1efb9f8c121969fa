package tenancy_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
)

// What the tenancy suites share: hostile endpoints a tenant may name, and
// the search for Secret bytes in everything the operator writes.

// echoPart is what of the request's credentials a hostile endpoint sends
// back.
type echoPart int

const (
	// echoNothing sends back no credential.
	echoNothing echoPart = iota
	// echoWhole sends back the whole credential header
	// ("Bearer x", "PVEAPIToken=id=x", a session Cookie).
	echoWhole
	// echoAfterScheme sends back what follows the scheme ("x" of
	// "Bearer x", "id=x" of "PVEAPIToken=id=x").
	echoAfterScheme
	// echoSecret sends back the secret alone ("x" of "PVEAPIToken=id=x").
	echoSecret
)

func (e echoPart) String() string {
	return [...]string{"nothing", "whole header", "after the scheme", "the secret alone"}[e]
}

// bodyShape is how a hostile endpoint words its error answer.
type bodyShape int

const (
	// shapeGitHub is GitHub's error document: message, documentation_url.
	shapeGitHub bodyShape = iota
	// shapeKubernetes is a Kubernetes Status with the echo in its message
	// and again in its details.
	shapeKubernetes
	// shapeProxmox is Proxmox's: data null, errors by parameter, message.
	shapeProxmox
	// shapePlain is text/plain, the echo written as it came.
	shapePlain
)

func (s bodyShape) String() string {
	return [...]string{"GitHub JSON", "Kubernetes Status", "Proxmox JSON", "plain text"}[s]
}

// hostile says how a hostile endpoint answers every request.
type hostile struct {
	// TLS serves https with httptest's own certificate.
	TLS bool
	// Status is the answer's status code.
	Status int
	// Echo is what of the request's credentials the body sends back, in
	// Shape.
	Echo  echoPart
	Shape bodyShape
	// InHeader sends the echo back in WWW-Authenticate and X-Echo too.
	InHeader bool
	// Hang never answers: the request waits until the client gives up (or
	// the server closes).
	Hang bool
}

func (h hostile) String() string {
	if h.Hang {
		return fmt.Sprintf("hangs (tls %t)", h.TLS)
	}
	return fmt.Sprintf("%d echoing %s as %s (header %t, tls %t)", h.Status, h.Echo, h.Shape, h.InHeader, h.TLS)
}

// credentialOf is the request's credential as a hostile endpoint sees it:
// the Authorization header, else the session Cookie.
func credentialOf(r *http.Request) string {
	if v := r.Header.Get("Authorization"); v != "" {
		return v
	}
	return r.Header.Get("Cookie")
}

// echoOf is the part of credential e sends back.
func echoOf(credential string, e echoPart) string {
	afterScheme := credential
	if _, rest, ok := strings.Cut(credential, " "); ok {
		afterScheme = rest
	} else if _, rest, ok := strings.Cut(credential, "="); ok {
		afterScheme = rest
	}
	switch e {
	case echoWhole:
		return credential
	case echoAfterScheme:
		return afterScheme
	case echoSecret:
		// PVEAPIToken=<user@realm!name>=<secret>: a token id has no "=".
		if strings.HasPrefix(credential, "PVEAPIToken=") {
			if _, secret, ok := strings.Cut(afterScheme, "="); ok {
				return secret
			}
		}
		return afterScheme
	}
	return ""
}

// hostileServer starts an endpoint that answers as h says, closed (hung
// requests released) when the test ends or close is called.
func hostileServer(t testing.TB, h hostile) (s *httptest.Server, closeFn func()) {
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.Hang {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		echoed := echoOf(credentialOf(r), h.Echo)
		if h.InHeader && echoed != "" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf("Bearer error=%q, error_description=%q", "invalid_token", echoed))
			w.Header().Set("X-Echo", echoed)
		}
		var body []byte
		switch h.Shape {
		case shapeGitHub:
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			body, _ = json.Marshal(map[string]string{"message": "Bad credentials: " + echoed, "documentation_url": "https://docs.github.com/rest"})
		case shapeKubernetes:
			w.Header().Set("Content-Type", "application/json")
			body, _ = json.Marshal(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure",
				"message": "you sent " + echoed, "reason": "Unauthorized", "code": h.Status, "details": map[string]string{"auth": echoed}})
		case shapeProxmox:
			w.Header().Set("Content-Type", "application/json;charset=UTF-8")
			body, _ = json.Marshal(map[string]any{"data": nil, "errors": map[string]string{"token": "invalid token " + echoed}, "message": "authentication failure " + echoed})
		case shapePlain:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			body = []byte("you sent " + echoed + "\n")
		}
		w.WriteHeader(h.Status)
		_, _ = w.Write(body)
	})
	if h.TLS {
		s = httptest.NewTLSServer(handler)
	} else {
		s = httptest.NewServer(handler)
	}
	var once sync.Once
	closeFn = func() {
		once.Do(func() {
			close(release)
			s.CloseClientConnections()
			s.Close()
		})
	}
	t.Cleanup(closeFn)
	return s, closeFn
}

// echoGitHub is a hostile GitHub API: plain HTTP (which apiURL allows),
// answering every request with status and GitHub's error shape whose
// message is the request's Authorization header.
func echoGitHub(t *testing.T, status int) *httptest.Server {
	s, _ := hostileServer(t, hostile{Status: status, Echo: echoWhole, Shape: shapeGitHub})
	return s
}

// echo is a hostile server: it answers every request with an error whose
// body is the request's credentials, as a tenant's endpoint may.
func echo(t *testing.T) *httptest.Server {
	s, _ := hostileServer(t, hostile{TLS: true, Status: http.StatusUnauthorized, Echo: echoWhole, Shape: shapeKubernetes})
	return s
}

// quiet is the context of the tests' own API calls: client-go logs request
// and response bodies (a Secret's data among them) at verbosity 8 through
// the context's logger, else klog's, which this package captures as the
// operator's log. What the tests themselves send is not the operator's to
// keep out of its log.
func quiet() context.Context {
	return klog.NewContext(context.Background(), logr.Discard())
}

// refusedAddress is a loopback address nothing listens on: a connection to
// it is refused.
func refusedAddress(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// needles are the forms a marker could take once it has left its Secret:
// as it is, JSON-escaped once or twice (everything searched is JSON or a
// log line that quotes), Go-quoted, in base64 at any alignment (a value
// encoded with text before it), and every 16-byte window of it with enough
// distinct bytes not to be found by chance (a leak of a part; at most
// maxWindows of them, spread over the marker, so a marker of kilobytes
// costs no more to search for than a short one). With whole, only the
// marker itself, escaped.
func needles(marker string, whole bool) [][]byte {
	var out [][]byte
	seen := map[string]bool{}
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, []byte(s))
		}
	}
	escaped := func(s string) []string {
		once := jsonString(s, true)
		return []string{s, once, jsonString(s, false), jsonString(once, true), jsonString(jsonString(s, false), false),
			strings.Trim(strconv.Quote(s), `"`)}
	}
	for _, f := range escaped(marker) {
		add(f)
	}
	if whole {
		return out
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		add(enc.EncodeToString([]byte(marker)))
		for shift := 0; shift < 3 && shift < len(marker); shift++ {
			// marker[shift:] starting a 3-byte group: its encoding up to
			// the last whole group is in the encoding of any text holding
			// the marker at that alignment.
			whole := (len(marker) - shift) / 3 * 3
			if whole >= 12 {
				add(enc.EncodeToString([]byte(marker[shift : shift+whole])))
			}
		}
	}
	const window, maxWindows = 16, 24
	stride := max(8, (len(marker)-window)/maxWindows+1)
	for i := 0; i+window <= len(marker); i += stride {
		w := marker[i : i+window]
		if distinct(w) < 8 {
			continue
		}
		once := jsonString(w, true)
		add(w)
		add(once)
		add(jsonString(once, true))
	}
	return out
}

func jsonString(s string, escapeHTML bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(escapeHTML)
	_ = enc.Encode(s)
	return strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(b.String(), `"`), "\n"), `"`)
}

func distinct(s string) int {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	return len(seen)
}

// leaks searches every HyperFleet object, Event and ConfigMap of the
// cluster, the operator's log from the offset logFrom on and every metric
// for each marker (markers: what it is → its bytes) in any of its forms
// (needles), and says where each was found.
func leaks(ctx context.Context, t testing.TB, markers map[string]string, logFrom int) []string {
	t.Helper()
	type searched struct {
		place string
		text  []byte
	}
	var texts []searched
	for _, list := range []client.ObjectList{&hypervisorv1alpha1.HypervisorClusterList{}, &hypervisorv1alpha1.MachineClaimList{},
		&hypervisorv1alpha1.HypervisorMachineTemplateList{}, &hypervisorv1alpha1.RunnerPoolList{}, &hypervisorv1alpha1.RunnerJobList{},
		&corev1.EventList{}, &corev1.ConfigMapList{}} {
		if err := testenv.Client().List(ctx, list); err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(list)
		texts = append(texts, searched{fmt.Sprintf("%T", list), data})
	}
	texts = append(texts, searched{"the operator's log", logs.Since(logFrom)})
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(families)
	texts = append(texts, searched{"the metrics", data})

	var where []string
	for what, m := range markers {
		forms := needles(m, false)
		for _, s := range texts {
			for _, n := range forms {
				if i := bytes.Index(s.text, n); i >= 0 {
					where = append(where, fmt.Sprintf("%s (%s, as %q in …%s…)", s.place, what, n, excerpt(s.text, i, len(n))))
					break
				}
			}
		}
	}
	return where
}

// excerpt is text around [i, i+n), for a failure message.
func excerpt(text []byte, i, n int) string {
	from, to := max(0, i-120), min(len(text), i+n+40)
	return string(text[from:to])
}
