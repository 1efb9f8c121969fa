// Package admission embeds the admission policies kustomize/ ships, so the
// benchmarks, the sandbox and their tests install exactly what a cluster
// gets.
package admission

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"bytes"
	"errors"
	"io"
)

//go:embed machineclaim-finalizer/machineclaim-finalizer.yaml
var machineClaimFinalizer []byte

//go:embed workload-pods.yaml
var workloadPods []byte

// Objects returns the policies and their bindings.
func Objects() ([]*unstructured.Unstructured, error) {
	finalizer, err := decode("machineclaim-finalizer.yaml", machineClaimFinalizer)
	if err != nil {
		return nil, err
	}
	pods, err := WorkloadPodsPolicy()
	if err != nil {
		return nil, err
	}
	return append(finalizer, pods...), nil
}

// WorkloadPodsPolicy returns the policy (and its binding) that lets only
// users who may make Pods create the kinds the operator turns into Pods.
func WorkloadPodsPolicy() ([]*unstructured.Unstructured, error) {
	return decode("workload-pods.yaml", workloadPods)
}

func decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("decoding %s: %w", name, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Install creates the policies and bindings, leaving any already there,
// and returns once the API server applies them: it picks a new policy up
// from its own informer, a moment later, and a claim created before then
// would be stored without the finalizer (which the operator then adds, at
// the cost of the write the policy saves).
func Install(ctx context.Context, c client.Client) error {
	objs, err := Objects()
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// A dry run passes admission and stores nothing.
		probe := &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, GenerateName: "admission-probe-"},
			Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "probe"}},
		}
		err := c.Create(ctx, probe, client.DryRunAll)
		if err == nil && len(probe.Finalizers) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("the API server did not apply the MachineClaim finalizer policy within a minute: %w", err)
			}
			return errors.New("the API server did not apply the MachineClaim finalizer policy within a minute: a dry-run claim came back without a finalizer")
		case <-time.After(200 * time.Millisecond):
		}
	}
}
