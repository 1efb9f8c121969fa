package providers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/hyperfleet/hyperfleet/providers"
)

// An endpoint that echoes the request's credentials in an error answer
// gets them back as [redacted], whatever header carried them; a successful
// answer is passed as it is.
func TestRedactingTransportRemovesEchoedCredentials(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			_, _ = io.WriteString(w, r.Header.Get("Authorization"))
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, strings.Join([]string{r.Header.Get("Authorization"), r.Header.Get("apikey"), r.Header.Get("Cookie")}, "|"))
	}))
	defer echo.Close()
	c := &http.Client{Transport: &providers.RedactingTransport{Base: http.DefaultTransport}}
	for name, h := range map[string]map[string]string{
		"bearer":          {"Authorization": "Bearer ghs_s3cr3tT0k3nValue"},
		"github token":    {"Authorization": "token ghp_s3cr3tT0k3nValue"},
		"proxmox token":   {"Authorization": "PVEAPIToken=root@pam!ci=0b3f2a6e-s3cr3t"},
		"supabase":        {"apikey": "eyJs3cr3tK3y", "Authorization": "Bearer eyJs3cr3tK3y"},
		"proxmox session": {"Cookie": "PVEAuthCookie=PVE:root@pam:s3cr3tTicket"},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, echo.URL+"/fail", nil)
			for k, v := range h {
				req.Header.Set(k, v)
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if strings.Contains(string(body), "s3cr3t") || !strings.Contains(string(body), "[redacted]") {
				t.Errorf("error body %q still carries the credential", body)
			}
		})
	}
	req, _ := http.NewRequest(http.MethodGet, echo.URL+"/ok", nil)
	req.Header.Set("Authorization", "Bearer ghs_s3cr3tT0k3nValue")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if string(body) != "Bearer ghs_s3cr3tT0k3nValue" {
		t.Errorf("a successful answer was changed: %q", body)
	}
}

// Found by internal/tenancy's TestPropertySecretBytesNeverLeaveTheirSecret:
// a credential echoed inside a JSON message is escaped there (quotes,
// backslashes, and <, > and & as \u003c…), and a Proxmox token secret that
// holds "=" (as base64 does) may be echoed alone, without the token id
// before it. Both are redacted.
func TestRedactingTransportRemovesEscapedAndPartialEchoes(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := r.Header.Get("Authorization")
		if secret, ok := strings.CutPrefix(v, "PVEAPIToken=root@pam!ci="); ok {
			v = secret
		}
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "Bad credentials: " + v})
	}))
	defer echo.Close()
	c := &http.Client{Transport: &providers.RedactingTransport{Base: http.DefaultTransport}}
	for name, h := range map[string]string{
		"JSON specials":            `Bearer s3cr3t"quote\backslash<tag>&amp`,
		"proxmox secret with =":    "PVEAPIToken=root@pam!ci=s3cr3t=base64==",
		"proxmox secret, specials": `PVEAPIToken=root@pam!ci=s3cr3t="<x>"`,
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, echo.URL, nil)
			req.Header.Set("Authorization", h)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct{ Message string }
			err = json.NewDecoder(res.Body).Decode(&doc)
			_ = res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(doc.Message, "s3cr3t") || !strings.Contains(doc.Message, "[redacted]") {
				t.Errorf("error message %q still carries the credential", doc.Message)
			}
		})
	}
}

// Found by the same property: client-go logs a Secret it reads or writes,
// whole, at verbosity 8 and above, through the context's logger. Through
// WithoutBodies a logger at any verbosity gets the request lines below 8
// and never a body.
func TestWithoutBodiesDropsClientGoBodies(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 10})
	ctx := providers.WithoutBodies(logr.NewContext(context.Background(), logger))
	l := logr.FromContextOrDiscard(ctx)
	l.V(6).Info("GET https://api/secrets/x", "status", 200)
	l.V(8).Info("Response Body", "body", "s3cr3t")
	l.WithName("rest").WithValues("verb", "GET").V(9).Info("Response Body", "body", "s3cr3t")
	if l.V(8).Enabled() {
		t.Error("verbosity 8 is enabled through WithoutBodies")
	}
	if len(lines) != 1 || strings.Contains(strings.Join(lines, "\n"), "s3cr3t") {
		t.Errorf("logged %q, want the request line alone", lines)
	}
}
