package runnerlab

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// RunnerVM is the runner template's VirtualMachine: the smallest KubeVirt
// accepts, from a runner image.
const RunnerVM = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","spec":{"template":{"spec":{"domain":{"devices":{}},
"volumes":[{"name":"root","containerDisk":{"image":"ghcr.io/example/runner-image:2.321.0"}}]}}}}`

// Pool is one RunnerPool to make: it serves jobs labelled with its name.
type Pool struct {
	Name        string
	MaxReplicas int32
	// IdleTTL is how long an idle runner stays; 0 keeps the default.
	IdleTTL time.Duration
	// ScaleSet makes it a scale-set pool whose scale set has its name
	// (jobs then ask for that one label).
	ScaleSet bool
}

// Prepare makes in ns a personal access token Secret for githubsim, a
// KubeVirt HypervisorCluster "kv", a runner template "runner" and pools,
// all on that one credential.
func (l *Lab) Prepare(ctx context.Context, c client.Client, ns string, pools ...Pool) error {
	owner, repo, _ := strings.Cut(Repo, "/")
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "github-pat", Labels: map[string]string{meta.CredentialsLabel: "true"}},
			StringData: map[string]string{"token": l.GitHub.PAT()}},
		&hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: "kv"},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{Provider: hypervisorv1alpha1.ProviderKubeVirt}},
		&hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: "runner"},
			Spec: hypervisorv1alpha1.HypervisorMachineTemplateSpec{ClusterRef: meta.LocalObjectReference{Name: "kv"},
				KubeVirt: &hypervisorv1alpha1.KubeVirtTemplateSpec{VirtualMachine: &runtime.RawExtension{Raw: []byte(RunnerVM)}}}},
	}
	for _, p := range pools {
		pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec: hypervisorv1alpha1.RunnerPoolSpec{
				TemplateRef: meta.LocalObjectReference{Name: "runner"},
				GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: owner, Repository: repo,
					CredentialsRef: meta.LocalObjectReference{Name: "github-pat"}, APIURL: l.GitHub.URL() + "/"},
				Labels: []string{p.Name}, MinReplicas: 0, MaxReplicas: p.MaxReplicas,
			}}
		if p.ScaleSet {
			pool.Spec.GitHub.ScaleSet = &hypervisorv1alpha1.ScaleSetSpec{Name: p.Name}
			pool.Spec.Labels = nil
		}
		if p.IdleTTL > 0 {
			pool.Spec.IdleTTL = &metav1.Duration{Duration: p.IdleTTL}
		}
		objs = append(objs, pool)
	}
	for _, o := range objs {
		o.SetNamespace(ns)
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
