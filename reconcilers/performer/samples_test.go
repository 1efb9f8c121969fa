package performer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/samples"
)

// The sample Performers `hyperfleet-dev` applies place as their comments say
// with the built-in table, without a conflict.
func TestSamplesPlace(t *testing.T) {
	files, _, err := samples.Files()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode("61-performers.yaml", files["61-performers.yaml"])
	if err != nil {
		t.Fatal(err)
	}
	pods := map[string]*corev1.Pod{}
	for _, u := range objs {
		p := &hourglassv1alpha1.Performer{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			t.Fatal(err)
		}
		p.Namespace = "default"
		pod, _, err := desiredPod(p, DefaultPlacement())
		if err != nil {
			t.Fatalf("sample %s: %v", p.Name, err)
		}
		pods[p.Name] = pod
	}
	gpu := pods["avs-performer-gpu"]
	if gpu == nil || gpu.Spec.NodeSelector["nvidia.com/gpu.product"] != "NVIDIA-A100-SXM4-80GB" || gpu.Spec.NodeSelector["accelerator"] != "nvidia-tesla-a100" {
		t.Errorf("GPU sample placement: %+v", gpu)
	} else if q := gpu.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; q.Value() != 2 {
		t.Errorf("GPU sample limit: %v", q)
	}
	sgx := pods["avs-performer-sgx"]
	if sgx == nil || sgx.Spec.NodeSelector["intel.feature.node.kubernetes.io/sgx"] != "true" || len(sgx.Spec.Tolerations) != 1 {
		t.Errorf("SGX sample placement: %+v", sgx)
	}
}
