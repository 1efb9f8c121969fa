package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
)

// The Service range holds more than envtest's 254 ClusterIPs: the
// Performer benchmark makes a Service per Performer, 1,000 at its full
// size, and ran out at the 253rd.
func TestServiceRangeHoldsMoreThanASlash24(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir, err := controlplane.BinaryDir(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	plane, err := controlplane.Start(controlplane.Options{BinaryDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plane.Stop() }()
	cfg := plane.Config
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	const n = 300
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(20)
	for i := range n {
		g.Go(func() error {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%03d", i), Namespace: "default"},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			}
			_, err := cs.CoreV1().Services("default").Create(gctx, svc, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("creating %d ClusterIP Services: %v", n, err)
	}
}
