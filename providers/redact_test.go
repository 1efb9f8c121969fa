package providers_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
