package attestation_test

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
)

var machineConfig = spire.MachineConfig{JoinToken: "tok-123", ServerAddress: "spire.example:8081", TrustDomain: "example.org",
	TrustBundle: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", SPIFFEID: "spiffe://example.org/hyperfleet/i/MachineClaim/ns/a/u/bootstrap",
	CredentialEndpoint: "https://op:9444/v1/credentials", EndpointID: "spiffe://example.org/hyperfleet/i/credential-endpoint"}

type part struct{ kind, body string }

// parts splits a multipart user data as cloud-init does, with Go's own
// MIME reader: each part's type and body (the line break before a
// boundary belongs to the boundary, so a body loses its last one).
func parts(t *testing.T, ud string) []part {
	t.Helper()
	header, body, _ := strings.Cut(ud, "\n\n")
	ct, _ := strings.CutPrefix(strings.Split(header, "\n")[0], "Content-Type: ")
	_, params, err := mime.ParseMediaType(ct)
	if err != nil {
		t.Fatalf("content type %q: %v", ct, err)
	}
	r := multipart.NewReader(strings.NewReader(body), params["boundary"])
	var out []part
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(p)
		mt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		out = append(out, part{mt, string(data)})
	}
}

// TestWithMachineConfig: the attestation part is added beside the user's
// own, which is kept byte for byte; the machine config can be read back;
// user data that cannot be combined is refused with what to do.
func TestWithMachineConfig(t *testing.T) {
	user := "#cloud-config\nwrite_files:\n  - path: /etc/hyperfleet/bootstrap.json\n    content: |\n      {}\nruncmd:\n  - [echo, hi]\n"
	ud, err := attestation.WithMachineConfig(user, machineConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := parts(t, ud)
	if len(got) != 2 || got[0] != (part{"text/cloud-config", strings.TrimSuffix(user, "\n")}) || got[1].kind != "text/cloud-config" {
		t.Fatalf("parts = %q; want the user's cloud-config unchanged and ours", got)
	}
	if strings.Contains(ud, machineConfig.JoinToken) {
		t.Fatal("the join token is readable in the user data as plain text; it goes base64 inside the file entry")
	}
	for _, want := range []string{"merge_how:", "settings: [append]", "path: " + spire.MachineConfigPath, `permissions: "0600"`} {
		if !strings.Contains(ud, want) {
			t.Fatalf("user data lacks %q:\n%s", want, ud)
		}
	}
	if strings.Contains(ud, "runcmd:\n  - [\"") {
		t.Fatal("a runcmd was added though none was asked for")
	}
	back, ok, err := attestation.MachineConfigFrom(ud)
	if err != nil || !ok || back != machineConfig {
		t.Fatalf("read back %+v, %v, %v; want %+v", back, ok, err, machineConfig)
	}

	alone, err := attestation.WithMachineConfig("", machineConfig, []string{"/usr/local/bin/hyperfleet-bootstrap", "attest"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(alone, "#cloud-config\n") || !strings.Contains(alone, "runcmd:\n  - [\"/usr/local/bin/hyperfleet-bootstrap\", \"attest\"]\n") {
		t.Fatalf("without user data of its own, ours is the whole user data and runs the agent:\n%s", alone)
	}
	script, err := attestation.WithMachineConfig("#!/bin/sh\necho hi\n", machineConfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := parts(t, script); got[0] != (part{"text/x-shellscript", "#!/bin/sh\necho hi"}) {
		t.Fatalf("a script is a text/x-shellscript part: %q", parts(t, script))
	}
	// The refusal reaches a condition and an event: it says what kind of
	// data it is and never quotes it (user data may be a credentials Secret).
	for _, bad := range []string{"Content-Type: multipart/mixed; boundary=x\n\n--x--\n", "just some text\n", "ghp_SecretMarker0123456789abcdefABCDEF\n"} {
		_, err := attestation.WithMachineConfig(bad, machineConfig, nil)
		if !errors.Is(err, attestation.ErrUserDataKind) {
			t.Fatalf("user data %q: %v, want ErrUserDataKind", bad, err)
		}
		first, _, _ := strings.Cut(bad, "\n")
		for _, word := range strings.FieldsFunc(first, func(r rune) bool { return r == ' ' || r == ';' || r == ':' || r == '=' }) {
			if len(word) > 3 && strings.Contains(err.Error(), word) {
				t.Errorf("the refusal quotes the user data (%q): %v", word, err)
			}
		}
	}
	if _, ok, err := attestation.MachineConfigFrom(user); ok || err != nil {
		t.Fatalf("user data without attestation: ok %v, %v", ok, err)
	}
}
