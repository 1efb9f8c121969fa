package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/providers"
)

// resolveInstallation returns the installation id: --installation-id when
// set, else the UID of the operator's namespace. A namespace UID is stable
// for the installation's life and differs between clusters, so dev and prod
// on one hypervisor never share an id even with the same namespace name.
// It is read once, at start: an id that changed while running would make
// every machine look like another installation's.
func resolveInstallation(ctx context.Context, r client.Reader, o Options, log logr.Logger) (string, error) {
	if o.InstallationID != "" {
		return o.InstallationID, providers.ValidateInstallation(o.InstallationID)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ns := &corev1.Namespace{}
	err := r.Get(ctx, client.ObjectKey{Name: o.OperatorNamespace}, ns)
	switch {
	case err == nil:
		return string(ns.UID), nil
	case apierrors.IsNotFound(err):
		// Only outside a cluster (a development run against some API
		// server): the operator's Pod lives in its namespace. The name is
		// all there is; it is stable, but two clusters with the same
		// namespace name would share it.
		id := namespaceNameID(o.OperatorNamespace)
		log.Info("The operator's namespace does not exist; the installation id is derived from its name. Set --installation-id when another installation shares a hypervisor",
			"namespace", o.OperatorNamespace, "installationID", id)
		return id, nil
	}
	return "", fmt.Errorf("reading namespace %s, whose UID is the default installation id: %w; grant get on namespaces, or set --installation-id", o.OperatorNamespace, err)
}

// namespaceNameID is the fallback id of a namespace that does not exist.
func namespaceNameID(namespace string) string {
	sum := sha256.Sum256([]byte(namespace))
	return "ns-" + hex.EncodeToString(sum[:8])
}
