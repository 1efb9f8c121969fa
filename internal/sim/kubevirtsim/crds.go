package kubevirtsim

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Resource names of the two CRDs, as KubeVirt's virt-operator installs them.
const (
	vmCRDName  = "virtualmachines." + group
	vmiCRDName = "virtualmachineinstances." + group
	group      = "kubevirt.io"
)

// installTimeout bounds Install when its context has no deadline: a CRD is
// normally served within a second or two.
const installTimeout = time.Minute

// CRDs returns the KubeVirt VirtualMachine and VirtualMachineInstance
// CustomResourceDefinitions (kubevirt.io/v1, served and stored), namespaced,
// with the status subresource, KubeVirt's short names, the "all" category and
// its printer columns. Spec and status keep unknown fields rather than carry
// KubeVirt's full schema: the simulator validates nothing, as it plays no
// admission webhook either. Each call returns fresh objects.
func CRDs() []*apiextensionsv1.CustomResourceDefinition {
	return []*apiextensionsv1.CustomResourceDefinition{
		newCRD("VirtualMachine", "virtualmachines", "virtualmachine", []string{"vm", "vms"},
			[]apiextensionsv1.CustomResourceColumnDefinition{
				{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				{Name: "Status", Type: "string", JSONPath: ".status.printableStatus", Description: "Human Readable Status"},
				{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
			}),
		newCRD("VirtualMachineInstance", "virtualmachineinstances", "virtualmachineinstance", []string{"vmi", "vmis"},
			[]apiextensionsv1.CustomResourceColumnDefinition{
				{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				{Name: "Phase", Type: "string", JSONPath: ".status.phase"},
				{Name: "IP", Type: "string", JSONPath: ".status.interfaces[0].ipAddress"},
				{Name: "NodeName", Type: "string", JSONPath: ".status.nodeName"},
				{Name: "Ready", Type: "string", JSONPath: ".status.conditions[?(@.type=='Ready')].status"},
				{Name: "Live-Migratable", Type: "string", Priority: 1, JSONPath: ".status.conditions[?(@.type=='LiveMigratable')].status"},
				{Name: "Paused", Type: "string", Priority: 1, JSONPath: ".status.conditions[?(@.type=='Paused')].status"},
			}),
	}
}

func newCRD(kind, plural, singular string, shortNames []string, columns []apiextensionsv1.CustomResourceColumnDefinition) *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	// Metadata stays a plain object so the API server applies its usual
	// ObjectMeta handling; only spec and status are opaque.
	schema := &apiextensionsv1.JSONSchemaProps{
		Type:        "object",
		Description: kind + " (schema abbreviated by kubevirtsim: spec and status keep unknown fields).",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": {Type: "string"},
			"kind":       {Type: "string"},
			"metadata":   {Type: "object"},
			"spec":       {Type: "object", XPreserveUnknownFields: &preserve},
			"status":     {Type: "object", XPreserveUnknownFields: &preserve},
		},
		Required: []string{"spec"},
	}
	return &apiextensionsv1.CustomResourceDefinition{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{
			Name: plural + "." + group,
			Labels: map[string]string{
				kubevirtv1.AppComponentLabel: kubevirtv1.AppComponent,
				kubevirtv1.ManagedByLabel:    "kubevirtsim",
			},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind:       kind,
				ListKind:   kind + "List",
				Plural:     plural,
				Singular:   singular,
				ShortNames: shortNames,
				Categories: []string{"all"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name:                     "v1",
				Served:                   true,
				Storage:                  true,
				Schema:                   &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: schema},
				Subresources:             &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				AdditionalPrinterColumns: columns,
			}},
		},
	}
}

// Install creates the CRDs, or updates them to CRDs() when they exist, and
// waits until both are Established and discovery serves kubevirt.io/v1 with
// their status subresources, so a RESTMapper built afterwards finds them. It
// gives up when ctx ends, or after a minute if ctx has no deadline.
func Install(ctx context.Context, cfg *rest.Config) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, installTimeout)
		defer cancel()
	}
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return fmt.Errorf("kubevirtsim: registering apiextensions/v1: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return fmt.Errorf("kubevirtsim: creating a client: %w", err)
	}
	for _, crd := range CRDs() {
		if err := createOrUpdateCRD(ctx, c, crd); err != nil {
			return err
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubevirtsim: creating a discovery client: %w", err)
	}
	// A bounded wait for the API server's own CRD controllers; there is no
	// watch that says "discovery now serves this".
	var last string
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, why, err := crdsServed(ctx, c, dc)
		last = why
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("kubevirtsim: waiting for the KubeVirt CRDs to be served (%s): %w", last, err)
	}
	return nil
}

func createOrUpdateCRD(ctx context.Context, c client.Client, want *apiextensionsv1.CustomResourceDefinition) error {
	err := c.Create(ctx, want.DeepCopy())
	switch {
	case err == nil:
		return nil
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("kubevirtsim: creating CRD %s: %w", want.Name, err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: want.Name}, have); err != nil {
			return err
		}
		have.Labels = want.Labels
		have.Spec = want.Spec
		return c.Update(ctx, have)
	})
	if err != nil {
		return fmt.Errorf("kubevirtsim: updating CRD %s: %w", want.Name, err)
	}
	return nil
}

// crdsServed reports whether both CRDs are Established with their names
// accepted and discovery lists the resources; why says what is missing.
func crdsServed(ctx context.Context, c client.Client, dc discovery.DiscoveryInterface) (bool, string, error) {
	for _, name := range []string{vmCRDName, vmiCRDName} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, "", fmt.Errorf("reading CRD %s: %w", name, err)
		}
		for _, t := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.NamesAccepted, apiextensionsv1.Established} {
			if !crdCondition(crd, t) {
				return false, fmt.Sprintf("CRD %s not %s", name, t), nil
			}
		}
	}
	list, err := dc.ServerResourcesForGroupVersion(kubevirtv1.GroupVersion.String())
	if err != nil {
		// NotFound until discovery catches up with the new CRDs.
		return false, "discovery of kubevirt.io/v1: " + err.Error(), nil
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	for _, r := range []string{"virtualmachines", "virtualmachines/status", "virtualmachineinstances", "virtualmachineinstances/status"} {
		if !served[r] {
			return false, "discovery does not list " + r + " yet", nil
		}
	}
	return true, "", nil
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == t {
			return cond.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}
