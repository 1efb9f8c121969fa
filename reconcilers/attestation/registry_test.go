package attestation_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/providers/spire"
	"github.com/hyperfleet/hyperfleet/reconcilers/attestation"
)

// A template's adminSocketPath is a tenant's word for a file on the
// operator's machine: only sockets the administrator allowed are dialled.
func TestOnlyAllowedAdminSocketsAreDialled(t *testing.T) {
	var dialled []string
	reg := &attestation.Registry{
		Installation: "inst", AdminSocket: "/run/spire/admin.sock", AllowedAdminSockets: []string{"/run/spire-b/admin.sock"},
		Dial: func(socket, _, _ string) (spire.Server, error) {
			dialled = append(dialled, socket)
			return nil, nil
		},
	}
	ctx := context.Background()
	for _, path := range []string{"/var/run/docker.sock", "/var/run/secrets/kubernetes.io/serviceaccount/token", "../../run/spire/admin.sock"} {
		_, err := reg.Server(ctx, &hypervisorv1alpha1.SPIREConfig{TrustDomain: "example.org", AdminSocketPath: path})
		if !errors.Is(err, attestation.ErrNotConfigured) || !strings.Contains(err.Error(), "spec.attestation.spire.adminSocketPath") {
			t.Errorf("adminSocketPath %s: %v; want a refusal naming the field", path, err)
		}
	}
	for _, path := range []string{"", "/run/spire/admin.sock", "/run/spire-b/admin.sock"} {
		if _, err := reg.Server(ctx, &hypervisorv1alpha1.SPIREConfig{TrustDomain: "example.org", AdminSocketPath: path}); err != nil {
			t.Errorf("adminSocketPath %q: %v", path, err)
		}
	}
	if want := []string{"/run/spire/admin.sock", "/run/spire-b/admin.sock"}; strings.Join(dialled, ",") != strings.Join(want, ",") {
		t.Errorf("dialled %v; want only %v", dialled, want)
	}
}
