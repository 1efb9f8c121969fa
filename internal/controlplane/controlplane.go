package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configure a control plane.
type Options struct {
	// BinaryDir holds kube-apiserver and etcd (see BinaryDir).
	BinaryDir string
	// CRDs to install and wait for before Start returns.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// StartTimeout bounds the start of each component.
	StartTimeout time.Duration
	// APIServerFlags are extra kube-apiserver flags (name without dashes →
	// value): the Performer benchmark's audit log.
	APIServerFlags map[string]string
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	env *envtest.Environment
	// Config talks to the API server as a cluster admin.
	Config *rest.Config
}

// ServiceCIDR is the control plane's Service ClusterIP range.
const ServiceCIDR = "10.0.0.0/16"

// Start runs etcd and kube-apiserver from opts.BinaryDir and installs opts.CRDs.
func Start(opts Options) (*ControlPlane, error) {
	if opts.StartTimeout == 0 {
		// A cold start on a loaded 2-core machine can take longer than envtest's 20 s default.
		opts.StartTimeout = 90 * time.Second
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    opts.BinaryDir,
		CRDs:                     opts.CRDs,
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// envtest's /24 holds 254 Services: a benchmark of 1,000 Performers
	// (a Service each) ran out at the 253rd with "range is full". A /16
	// holds 65,534, more than any suite or benchmark makes.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", ServiceCIDR)
	for name, value := range opts.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", opts.BinaryDir, err)
	}
	return &ControlPlane{env: env, Config: cfg}, nil
}

// WriteKubeconfig writes an admin kubeconfig for the control plane to path.
func (c *ControlPlane) WriteKubeconfig(path string) error {
	user, err := c.env.AddUser(envtest.User{Name: "hyperfleet-dev-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding an admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering the kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Stop stops kube-apiserver and etcd and removes their data.
func (c *ControlPlane) Stop() error {
	return c.env.Stop()
}
