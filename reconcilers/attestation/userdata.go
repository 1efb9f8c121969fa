package attestation

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// boundary separates the parts of a multipart user data; it never occurs
// in a cloud-config or a script of ours, and a user data that holds it is
// refused rather than cut in the wrong place.
const boundary = "==hyperfleet-attestation-7f3c=="

// ErrUserDataKind: the user data is of a kind the attestation part cannot
// be combined with.
var ErrUserDataKind = errors.New("user data cannot carry the attestation part")

// WithMachineConfig returns userData with a cloud-config part that writes
// mc to spire.MachineConfigPath (root-only) and, when run is set, runs it
// (`hyperfleet-bootstrap attest` for a machine whose workload is none; a
// runner's agent reads the file itself). The user's own part is kept as it
// is: both go into a MIME multipart, and ours asks cloud-init to append its
// lists (write_files, runcmd) to the user's instead of replacing them.
func WithMachineConfig(userData string, mc spire.MachineConfig, run []string) (string, error) {
	data, err := json.Marshal(mc)
	if err != nil {
		return "", err
	}
	var p strings.Builder
	p.WriteString("#cloud-config\n")
	p.WriteString("merge_how:\n  - name: list\n    settings: [append]\n  - name: dict\n    settings: [no_replace, recurse_list]\n")
	fmt.Fprintf(&p, "bootcmd:\n  - [install, -d, -m, \"0700\", %s]\n", path.Dir(spire.MachineConfigPath))
	p.WriteString("write_files:\n")
	fmt.Fprintf(&p, "  - path: %s\n    permissions: \"0600\"\n    encoding: b64\n    content: %s\n",
		spire.MachineConfigPath, base64.StdEncoding.EncodeToString(data))
	if len(run) > 0 {
		quoted := make([]string, len(run))
		for i, a := range run {
			q, _ := json.Marshal(a) // a YAML flow sequence takes JSON strings
			quoted[i] = string(q)
		}
		fmt.Fprintf(&p, "runcmd:\n  - [%s]\n", strings.Join(quoted, ", "))
	}
	ours := p.String()
	if strings.TrimSpace(userData) == "" {
		return ours, nil
	}
	if strings.Contains(userData, boundary) {
		return "", fmt.Errorf("%w: it contains the boundary HyperFleet separates parts with", ErrUserDataKind)
	}
	kind, err := partType(userData)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=\"%s\"\nMIME-Version: 1.0\n\n", boundary)
	for _, part := range []struct{ kind, body string }{{kind, userData}, {"text/cloud-config", ours}} {
		fmt.Fprintf(&b, "--%s\nContent-Type: %s; charset=\"utf-8\"\nMIME-Version: 1.0\n\n%s", boundary, part.kind, part.body)
		if !strings.HasSuffix(part.body, "\n") {
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "--%s--\n", boundary)
	return b.String(), nil
}

// partType is the MIME type cloud-init gives user data by its first line.
func partType(userData string) (string, error) {
	first, _, _ := strings.Cut(strings.TrimLeft(userData, "\r\n\t "), "\n")
	first = strings.TrimSpace(first)
	switch {
	case strings.HasPrefix(first, "#cloud-config"):
		return "text/cloud-config", nil
	case strings.HasPrefix(first, "#!"):
		return "text/x-shellscript", nil
	case strings.HasPrefix(first, "#cloud-boothook"):
		return "text/cloud-boothook", nil
	case strings.HasPrefix(first, "#include"):
		return "text/x-include-url", nil
	}
	// The message says what kind of data it is, never what it says: user
	// data is a Secret's bytes, and this error reaches a condition and an
	// event that every reader of the claim sees.
	kind := "data with no cloud-init marker on its first line"
	if strings.HasPrefix(strings.ToLower(first), "content-type:") || strings.HasPrefix(strings.ToLower(first), "mime-version:") {
		kind = "a MIME multipart"
	}
	return "", fmt.Errorf("%w: it is %s; attestation combines with a #cloud-config, a #! script, a #cloud-boothook or an #include (add the attestation's part to your multipart yourself, or start the user data with #cloud-config)", ErrUserDataKind, kind)
}

// MachineConfigFrom finds the MachineConfig WithMachineConfig put into
// userData, as a machine's cloud-init would write it: for the stand-ins of
// the VM side (the sandbox, tests). ok is false when there is none.
func MachineConfigFrom(userData string) (mc spire.MachineConfig, ok bool, err error) {
	_, rest, found := strings.Cut(userData, "  - path: "+spire.MachineConfigPath+"\n")
	if !found {
		return mc, false, nil
	}
	for _, line := range strings.Split(rest, "\n") {
		v, isContent := strings.CutPrefix(line, "    content: ")
		if !isContent {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return mc, true, fmt.Errorf("the attestation file's content: %w", err)
		}
		if err := json.Unmarshal(data, &mc); err != nil {
			return mc, true, fmt.Errorf("the attestation file: %w", err)
		}
		return mc, true, nil
	}
	return mc, true, errors.New("the attestation file has no content")
}
