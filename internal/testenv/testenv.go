// Package testenv gives each test package one real control plane (etcd and
// kube-apiserver, built from source) with the HyperFleet CRDs installed, and
// each test its own namespace.
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//	func TestX(t *testing.T) { ns := testenv.Namespace(t); c := testenv.Client() … }
package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/scheme"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
)

var (
	plane     *controlplane.ControlPlane
	k8sClient client.Client
	k8sScheme *runtime.Scheme
	nsCounter atomic.Int64
)

// Main starts the control plane, runs the package's tests and stops it. It
// exits the process with the tests' result.
func Main(m *testing.M) {
	os.Exit(run(m, nil))
}

// MainWith is Main with setup run once the control plane is up (to start a
// manager, say); the function it returns runs after the tests.
func MainWith(m *testing.M, setup func() (teardown func(), err error)) {
	os.Exit(run(m, setup))
}

func run(m *testing.M, setup func() (func(), error)) int {
	if err := start(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	teardown := func() {}
	if setup != nil {
		var err error
		if teardown, err = setup(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: setup: %v\n", err)
			_ = plane.Stop()
			return 1
		}
	}
	code := m.Run()
	teardown()
	if v := remainingViolations(); len(v) > 0 {
		fmt.Fprintf(os.Stderr, "testenv: kstatus check failed outside any test's namespace:\n  %s\n", strings.Join(v, "\n  "))
		code = 1
	}
	if err := plane.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping the control plane: %v\n", err)
	}
	return code
}

func start() error {
	installKstatusCheck()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	dir, err := controlplane.BinaryDir(ctx, os.Stderr)
	if err != nil {
		return err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return err
	}
	plane, err = controlplane.Start(controlplane.Options{BinaryDir: dir, CRDs: crds})
	if err != nil {
		return err
	}
	k8sScheme = scheme.New()
	// Tests also read the CRDs themselves.
	if err := apiextensionsv1.AddToScheme(k8sScheme); err != nil {
		return err
	}
	k8sClient, err = client.New(plane.Config, client.Options{Scheme: k8sScheme})
	return err
}

// Config returns an admin REST config for the control plane.
func Config() *rest.Config { return rest.CopyConfig(plane.Config) }

// Client returns an uncached admin client with every HyperFleet type registered.
func Client() client.Client { return k8sClient }

// Scheme returns the scheme the client uses.
func Scheme() *runtime.Scheme { return k8sScheme }

// Namespace creates a namespace for one test, deleted when it ends.
func Namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), sanitize(t.Name()))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { checkKstatus(t, name) })
	t.Cleanup(func() {
		// envtest runs no namespace controller, so the namespace stays
		// Terminating; deleting still stops its objects leaking into listings.
		_ = k8sClient.Delete(context.Background(), ns)
	})
	return name
}

// sanitize turns a test name into a DNS label fragment.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 50 {
		s = strings.TrimRight(s[:50], "-")
	}
	return s
}
