package spire

import (
	"errors"
	"fmt"
	"strings"
)

// idRoot is the first path segment of every SPIFFE ID HyperFleet issues, so
// they never collide with the IDs other tenants of a shared trust domain use.
const idRoot = "hyperfleet"

// MachineID names one machine HyperFleet made:
//
//	spiffe://<trust domain>/hyperfleet/<installation>/<kind>/<namespace>/<name>/<uid>
//
// The installation segment scopes listing and cleanup to one operator
// installation; the owner's UID makes a machine recreated under the same
// name a different identity, so an old agent can never speak for the new one.
type MachineID struct {
	TrustDomain  string
	Installation string
	// Kind, Namespace, Name and UID are the owning object's.
	Kind, Namespace, Name, UID string
}

// ErrInvalidID: a SPIFFE ID, or one of the parts it is built from, is not
// valid or not laid out as HyperFleet lays them out.
var ErrInvalidID = errors.New("invalid SPIFFE ID")

// String is the machine's SPIFFE ID. It does not validate; Validate does.
func (m MachineID) String() string {
	return "spiffe://" + m.TrustDomain + "/" + strings.Join(m.segments(), "/")
}

// Path is the ID's path, "/hyperfleet/...", as the SPIRE API carries it.
func (m MachineID) Path() string { return "/" + strings.Join(m.segments(), "/") }

func (m MachineID) segments() []string {
	return []string{idRoot, m.Installation, m.Kind, m.Namespace, m.Name, m.UID}
}

// Validate checks every part: the trust domain per the SPIFFE ID standard,
// and each path segment non-empty, not "." or "..", and only of the
// characters a SPIFFE path allows (so no "/" can shift the layout).
func (m MachineID) Validate() error {
	if err := validTrustDomain(m.TrustDomain); err != nil {
		return err
	}
	names := []string{"installation", "kind", "namespace", "name", "uid"}
	for i, seg := range m.segments()[1:] {
		if err := validSegment(seg); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidID, names[i], err)
		}
	}
	return nil
}

// Workload is the SPIFFE ID of a workload on the machine: the machine's ID
// with one more segment, so the installation prefix still covers it.
func (m MachineID) Workload(name string) (string, error) {
	if err := m.Validate(); err != nil {
		return "", err
	}
	if err := validSegment(name); err != nil {
		return "", fmt.Errorf("%w: workload: %w", ErrInvalidID, err)
	}
	return m.String() + "/" + name, nil
}

// InstallationPrefix is the ID prefix, ending in "/", that every ID of the
// installation starts with; another installation's IDs never do.
func InstallationPrefix(trustDomain, installation string) string {
	return "spiffe://" + trustDomain + "/" + idRoot + "/" + installation + "/"
}

// ParseID parses a machine's ID, or a workload's (one more segment, returned
// as workload; "" for the machine's own ID).
func ParseID(id string) (m MachineID, workload string, err error) {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	if !ok {
		return MachineID{}, "", fmt.Errorf("%w: %q does not start with spiffe://", ErrInvalidID, id)
	}
	td, path, _ := strings.Cut(rest, "/")
	segs := strings.Split(path, "/")
	if len(segs) != 6 && len(segs) != 7 || segs[0] != idRoot {
		return MachineID{}, "", fmt.Errorf("%w: %q is not spiffe://<trust domain>/%s/<installation>/<kind>/<namespace>/<name>/<uid>[/<workload>]", ErrInvalidID, id, idRoot)
	}
	m = MachineID{TrustDomain: td, Installation: segs[1], Kind: segs[2], Namespace: segs[3], Name: segs[4], UID: segs[5]}
	if err := m.Validate(); err != nil {
		return MachineID{}, "", err
	}
	if len(segs) == 7 {
		if err := validSegment(segs[6]); err != nil {
			return MachineID{}, "", fmt.Errorf("%w: workload: %w", ErrInvalidID, err)
		}
		workload = segs[6]
	}
	return m, workload, nil
}

// validTrustDomain: lowercase letters, digits, ".", "-" and "_", as the
// SPIFFE ID standard allows.
func validTrustDomain(td string) error {
	if td == "" {
		return fmt.Errorf("%w: empty trust domain", ErrInvalidID)
	}
	for _, r := range td {
		if !lowerOrDigit(r) && !strings.ContainsRune("._-", r) {
			return fmt.Errorf("%w: trust domain %q has %q (want lowercase letters, digits, '.', '-', '_')", ErrInvalidID, td, r)
		}
	}
	return nil
}

// validSegment: letters, digits, ".", "-" and "_", as the SPIFFE ID standard
// allows in a path segment; "." and ".." are refused since they would be
// read as relative paths.
func validSegment(s string) error {
	switch s {
	case "":
		return errors.New("empty")
	case ".", "..":
		return fmt.Errorf("%q is a relative path segment", s)
	}
	for _, r := range s {
		if !lowerOrDigit(r) && (r < 'A' || r > 'Z') && !strings.ContainsRune("._-", r) {
			return fmt.Errorf("%q has %q (want letters, digits, '.', '-', '_')", s, r)
		}
	}
	return nil
}

func lowerOrDigit(r rune) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' }
