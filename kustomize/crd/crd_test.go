package crd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cyberdeskv1alpha1 "github.com/hyperfleet/hyperfleet/apis/cyberdesk/v1alpha1"
	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/internal/manifests"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
	"github.com/hyperfleet/hyperfleet/samples"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestEveryCRDIsEstablished(t *testing.T) {
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 7 {
		t.Fatalf("want 7 CRDs (4 hypervisor, 1 cyberdesk, 2 hourglass), got %d", len(crds))
	}
	for _, want := range crds {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := testenv.Client().Get(context.Background(), types.NamespacedName{Name: want.Name}, got); err != nil {
			t.Fatalf("%s: %v", want.Name, err)
		}
		established := false
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("%s is not Established: %+v", want.Name, got.Status.Conditions)
		}
	}
}

// Every kind has short names, a status subresource and printer columns, and
// every field carries a description so `kubectl explain` documents it.
func TestCRDsAreSelfDescribing(t *testing.T) {
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if len(c.Spec.Names.ShortNames) == 0 {
			t.Errorf("%s has no short names", c.Name)
		}
		for _, v := range c.Spec.Versions {
			if v.Subresources == nil || v.Subresources.Status == nil {
				t.Errorf("%s/%s has no status subresource", c.Name, v.Name)
			}
			if len(v.AdditionalPrinterColumns) < 3 {
				t.Errorf("%s/%s has %d printer columns; kubectl get should tell the state", c.Name, v.Name, len(v.AdditionalPrinterColumns))
			}
			spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
			status := v.Schema.OpenAPIV3Schema.Properties["status"]
			for _, p := range append(undocumented("spec", spec), undocumented("status", status)...) {
				t.Errorf("%s: field %s has no description (kubectl explain would show nothing)", c.Spec.Names.Kind, p)
			}
			for _, cond := range []string{"observedGeneration", "conditions"} {
				if _, ok := status.Properties[cond]; !ok {
					t.Errorf("%s status lacks %s", c.Spec.Names.Kind, cond)
				}
			}
		}
	}
	names := map[string][]string{}
	for _, c := range crds {
		names[c.Spec.Names.Kind] = c.Spec.Names.ShortNames
	}
	if got := strings.Join(names["Cyberdesk"], ","); got != "cd,cds" {
		t.Errorf("Cyberdesk short names = %q, want cd,cds as the Kopf original", got)
	}
}

func undocumented(path string, s apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for name, prop := range s.Properties {
		p := path + "." + name
		if prop.Description == "" {
			out = append(out, p)
		}
		out = append(out, undocumented(p, prop)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		out = append(out, undocumented(path+"[]", *s.Items.Schema)...)
	}
	return out
}

func TestEverySampleIsAccepted(t *testing.T) {
	ns := testenv.Namespace(t)
	files, names, err := samples.Files()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no samples embedded")
	}
	kinds := map[string]bool{}
	for _, name := range names {
		objs, err := manifests.Decode(name, files[name])
		if err != nil {
			t.Fatal(err)
		}
		if err := manifests.Apply(context.Background(), testenv.Client(), ns, "samples-test", objs); err != nil {
			t.Errorf("sample %s refused: %v", name, err)
		}
		for _, o := range objs {
			kinds[o.GetKind()] = true
		}
	}
	for _, k := range []string{"HypervisorCluster", "HypervisorMachineTemplate", "MachineClaim", "RunnerPool", "Cyberdesk", "HourglassExecutor", "Performer"} {
		if !kinds[k] {
			t.Errorf("no sample of kind %s", k)
		}
	}
}

const (
	hvcProxmox = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: HypervisorCluster
metadata: {name: x}
spec:
  provider: proxmox
  endpoint: https://pve:8006/api2/json
  credentialsRef: {name: creds}
  proxmox: {}
`
	hmtProxmox = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: HypervisorMachineTemplate
metadata: {name: x}
spec:
  clusterRef: {name: pve}
  proxmox:
    source: {vmid: 9000}
`
	mcBasic = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: MachineClaim
metadata: {name: x}
spec:
  templateRef: {name: t}
`
	rpRepo = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: RunnerPool
metadata: {name: x}
spec:
  templateRef: {name: t}
  github:
    owner: acme
    repository: app
    credentialsRef: {name: gh}
`
	hgeBasic = `apiVersion: hourglass.eigenlayer.io/v1alpha1
kind: HourglassExecutor
metadata: {name: x}
spec:
  image: executor:v1
  aggregatorEndpoint: agg:9000
  operatorKeys: {secretRef: {name: keys}}
  chains:
  - {name: ethereum, chainId: 1, rpcURL: "https://eth", taskMailboxAddress: "0x2222222222222222222222222222222222222222"}
`
	perfBasic = `apiVersion: hourglass.eigenlayer.io/v1alpha1
kind: Performer
metadata: {name: x}
spec:
  avsAddress: "0x4444444444444444444444444444444444444444"
  image: performer
  version: v1
`
)

// edit returns base with the dotted path set to value (YAML), or removed when value is "-".
func edit(t *testing.T, base string, edits ...string) *unstructured.Unstructured {
	t.Helper()
	objs, err := manifests.Decode("case", []byte(base))
	if err != nil || len(objs) != 1 {
		t.Fatalf("decoding base: %v", err)
	}
	obj := objs[0]
	for i := 0; i+1 < len(edits); i += 2 {
		path := strings.Split(edits[i], ".")
		if edits[i+1] == "-" {
			unstructured.RemoveNestedField(obj.Object, path...)
			continue
		}
		v, err := manifests.Decode("value", []byte("apiVersion: v\nkind: K\nv: "+edits[i+1]))
		if err != nil {
			t.Fatalf("decoding %q: %v", edits[i+1], err)
		}
		if err := unstructured.SetNestedField(obj.Object, v[0].Object["v"], path...); err != nil {
			t.Fatalf("setting %s: %v", edits[i], err)
		}
	}
	return obj
}

func TestInvalidObjectsAreRefusedNamingTheField(t *testing.T) {
	cases := []struct {
		name  string
		obj   string
		edits []string
		want  string
	}{
		// HypervisorCluster
		{"proxmox without its section", hvcProxmox, []string{"spec.proxmox", "-"}, "spec.proxmox must be set, and spec.kubevirt must not, when spec.provider is proxmox"},
		{"proxmox with a kubevirt section", hvcProxmox, []string{"spec.kubevirt", "{}"}, "spec.proxmox must be set, and spec.kubevirt must not"},
		{"kubevirt with a proxmox section", hvcProxmox, []string{"spec.provider", "kubevirt"}, "spec.proxmox must not be set when spec.provider is kubevirt"},
		{"unknown provider", hvcProxmox, []string{"spec.provider", "vmware"}, `spec.provider: Unsupported value: "vmware"`},
		{"plain http endpoint", hvcProxmox, []string{"spec.endpoint", "http://pve:8006"}, "spec.endpoint is required for provider proxmox and must be an https:// URL"},
		{"proxmox without credentials", hvcProxmox, []string{"spec.credentialsRef", "-"}, "spec.credentialsRef is required for provider proxmox"},
		{"CA bundle and insecure together", hvcProxmox, []string{"spec.tls", "{insecureSkipVerify: true, caBundleRef: {name: ca, key: ca.crt}}"}, "spec.tls.caBundleRef and spec.tls.insecureSkipVerify are mutually exclusive"},
		{"nameserver not an IP", hvcProxmox, []string{"spec.proxmox.dns", "{nameservers: [dns.example.com]}"}, "each nameserver must be an IP address"},
		{"zero clone concurrency", hvcProxmox, []string{"spec.proxmox.maxConcurrentClonesPerNode", "0"}, "spec.proxmox.maxConcurrentClonesPerNode: Invalid value: 0"},
		{"bad proxmox tag", hvcProxmox, []string{"spec.proxmox.tags", "[Bad Tag]"}, "spec.proxmox.tags[0]"},
		// HypervisorMachineTemplate
		{"template for both providers", hmtProxmox, []string{"spec.kubevirt", "{virtualMachine: {}}"}, "exactly one of spec.proxmox or spec.kubevirt must be set"},
		{"template for no provider", hmtProxmox, []string{"spec.proxmox", "-"}, "exactly one of spec.proxmox or spec.kubevirt must be set"},
		{"source by vmid and name", hmtProxmox, []string{"spec.proxmox.source", "{vmid: 9000, name: ubuntu}"}, "spec.proxmox.source needs exactly one of vmid or name"},
		{"source vmid below 100", hmtProxmox, []string{"spec.proxmox.source", "{vmid: 42}"}, "spec.proxmox.source.vmid: Invalid value: 42"},
		{"unknown clone mode", hmtProxmox, []string{"spec.proxmox.cloneMode", "thin"}, `spec.proxmox.cloneMode: Unsupported value: "thin"`},
		{"memory too small", hmtProxmox, []string{"spec.resources", "{memory: 64Mi}"}, "spec.resources.memory must be at least 128Mi"},
		{"static without addresses", hmtProxmox, []string{"spec.network", "{ipv4: {mode: Static}}"}, "spec.network.ipv4.addresses and spec.network.ipv4.gateway are required when spec.network.ipv4.mode is Static"},
		{"static address without prefix", hmtProxmox, []string{"spec.network", "{ipv4: {mode: Static, addresses: [10.0.0.5], gateway: 10.0.0.1}}"}, "each address must be IPv4 in CIDR form"},
		{"runner workload without its section", hmtProxmox, []string{"spec.workload", "{type: github-runner}"}, "spec.workload.githubRunner is required when spec.workload.type is github-runner"},
		{"attestation without SPIRE", hmtProxmox, []string{"spec.attestation", "{method: join-token}"}, "spec.attestation.spire is required when spec.attestation.method is join-token or tpm"},
		{"kubevirt without a VM template", hmtProxmox, []string{"spec.proxmox", "-", "spec.kubevirt", "{runStrategy: Always}"}, "spec.kubevirt needs exactly one of virtualMachine (inline) or templateConfigMapRef"},
		// MachineClaim
		{"claim without template", mcBasic, []string{"spec.templateRef", "-"}, "spec.templateRef: Required value"},
		{"claim with a bad hostname", mcBasic, []string{"spec.hostname", "Not_A_Host"}, "spec.hostname in body should match"},
		// RunnerPool
		{"min above max", rpRepo, []string{"spec.minReplicas", "5", "spec.maxReplicas", "2"}, "spec.minReplicas must be less than or equal to spec.maxReplicas"},
		{"repository without owner", rpRepo, []string{"spec.github.owner", "-"}, "spec.github.repository requires spec.github.owner"},
		{"neither repository nor organization", rpRepo, []string{"spec.github.repository", "-"}, "spec.github needs owner and repository, or organization"},
		{"replicas above max", rpRepo, []string{"spec.maxReplicas", "3", "spec.replicas", "4"}, "spec.replicas must be between spec.minReplicas and spec.maxReplicas"},
		{"unknown registration method", rpRepo, []string{"spec.registrationMethod", "PAT"}, `spec.registrationMethod: Unsupported value: "PAT"`},
		// Cyberdesk
		{"timeout below one second", "apiVersion: cyberdesk.io/v1alpha1\nkind: Cyberdesk\nmetadata: {name: x}\nspec: {timeoutMs: 999}\n", nil, "spec.timeoutMs: Invalid value: 999: spec.timeoutMs in body should be greater than or equal to 1000"},
		// HourglassExecutor
		{"executor without chains", hgeBasic, []string{"spec.chains", "[]"}, "spec.chains: Invalid value: 0: spec.chains in body should have at least 1 items"},
		{"task mailbox not an address", hgeBasic, []string{"spec.chains", `[{name: eth, chainId: 1, rpcURL: "https://eth", taskMailboxAddress: "0x12"}]`}, "spec.chains[0].taskMailboxAddress in body should match '^0x[0-9a-fA-F]{40}$'"},
		{"chain id zero", hgeBasic, []string{"spec.chains", `[{name: eth, chainId: 0, rpcURL: "https://eth", taskMailboxAddress: "0x2222222222222222222222222222222222222222"}]`}, "spec.chains[0].chainId: Invalid value: 0"},
		{"rpc url not a url", hgeBasic, []string{"spec.chains", `[{name: eth, chainId: 1, rpcURL: "eth-node", taskMailboxAddress: "0x2222222222222222222222222222222222222222"}]`}, "spec.chains[0].rpcURL in body should match"},
		{"executor without keys", hgeBasic, []string{"spec.operatorKeys", "-"}, "spec.operatorKeys: Required value"},
		// Performer
		{"avs address too short", perfBasic, []string{"spec.avsAddress", `"0x1234"`}, "spec.avsAddress in body should match '^0x[0-9a-fA-F]{40}$'"},
		{"avs address not hex", perfBasic, []string{"spec.avsAddress", `"0xZZ44444444444444444444444444444444444444"`}, "spec.avsAddress in body should match"},
		{"TEE without a type", perfBasic, []string{"spec.hardwareRequirements", "{teeRequired: true}"}, "spec.hardwareRequirements.teeType (sgx, sev or tdx) is required when teeRequired is true"},
		{"unknown TEE type", perfBasic, []string{"spec.hardwareRequirements", "{teeRequired: true, teeType: trustzone}"}, `spec.hardwareRequirements.teeType: Unsupported value: "trustzone"`},
		{"GPU type without count", perfBasic, []string{"spec.hardwareRequirements", "{gpuType: nvidia-a100}"}, "spec.hardwareRequirements.gpuCount must be at least 1 when gpuType is set"},
		{"grpc port out of range", perfBasic, []string{"spec.config", "{grpcPort: 70000}"}, "spec.config.grpcPort: Invalid value: 70000"},
	}
	ns := testenv.Namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := edit(t, tc.obj, tc.edits...)
			obj.SetName(fmt.Sprintf("invalid-%d", i))
			obj.SetNamespace(ns)
			err := testenv.Client().Create(context.Background(), obj)
			if err == nil {
				t.Fatalf("accepted; want refusal containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refused with\n  %v\nwant the message to contain\n  %q", err, tc.want)
			}
		})
	}
}

func TestFieldsThatWouldOrphanAMachineAreImmutable(t *testing.T) {
	cases := []struct {
		name   string
		obj    string
		change []string
		want   string
	}{
		{"cluster provider", hvcProxmox, []string{"spec.provider", "kubevirt", "spec.proxmox", "-"}, "spec.provider is immutable"},
		{"template cluster", hmtProxmox, []string{"spec.clusterRef.name", "other"}, "spec.clusterRef is immutable"},
		{"claim template", mcBasic, []string{"spec.templateRef.name", "other"}, "spec.templateRef is immutable"},
		{"pool repository", rpRepo, []string{"spec.github.repository", "other"}, "spec.github.repository is immutable"},
		{"pool owner", rpRepo, []string{"spec.github.owner", "other"}, "spec.github.owner is immutable"},
	}
	ns := testenv.Namespace(t)
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := edit(t, tc.obj)
			obj.SetName(fmt.Sprintf("immutable-%d", i))
			obj.SetNamespace(ns)
			if err := testenv.Client().Create(ctx, obj); err != nil {
				t.Fatalf("creating: %v", err)
			}
			changed := edit(t, tc.obj, tc.change...)
			changed.SetName(obj.GetName())
			changed.SetNamespace(ns)
			changed.SetResourceVersion(obj.GetResourceVersion())
			err := testenv.Client().Update(ctx, changed)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update gave %v; want a refusal containing %q", err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	ns := testenv.Namespace(t)
	ctx := context.Background()
	cd := &cyberdeskv1alpha1.Cyberdesk{}
	cd.Name, cd.Namespace = "defaults", ns
	if err := testenv.Client().Create(ctx, cd); err != nil {
		t.Fatal(err)
	}
	if cd.Spec.TimeoutMs != 3600000 {
		t.Errorf("Cyberdesk spec.timeoutMs defaulted to %d, want 3600000", cd.Spec.TimeoutMs)
	}
	rp := edit(t, rpRepo)
	rp.SetNamespace(ns)
	if err := testenv.Client().Create(ctx, rp); err != nil {
		t.Fatal(err)
	}
	pool := &hypervisorv1alpha1.RunnerPool{}
	if err := testenv.Client().Get(ctx, client.ObjectKeyFromObject(rp), pool); err != nil {
		t.Fatal(err)
	}
	if pool.Spec.MinReplicas != 0 || pool.Spec.MaxReplicas != 10 || pool.Spec.RegistrationMethod != hypervisorv1alpha1.RegistrationToken {
		t.Errorf("RunnerPool defaults: min=%d max=%d method=%q", pool.Spec.MinReplicas, pool.Spec.MaxReplicas, pool.Spec.RegistrationMethod)
	}
	if pool.Spec.IdleTTL == nil || pool.Spec.IdleTTL.Duration.String() != "10m0s" {
		t.Errorf("RunnerPool spec.idleTTL defaulted to %v, want 10m", pool.Spec.IdleTTL)
	}
}

// kubectl scale goes through the scale subresource, which the pool must serve.
func TestRunnerPoolScaleSubresource(t *testing.T) {
	ns := testenv.Namespace(t)
	ctx := context.Background()
	rp := edit(t, rpRepo)
	rp.SetNamespace(ns)
	if err := testenv.Client().Create(ctx, rp); err != nil {
		t.Fatal(err)
	}
	pool := &hypervisorv1alpha1.RunnerPool{}
	pool.Name, pool.Namespace = rp.GetName(), ns
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 4}}
	if err := testenv.Client().SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scaling to 4: %v", err)
	}
	if err := testenv.Client().Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
		t.Fatal(err)
	}
	if pool.Spec.Replicas == nil || *pool.Spec.Replicas != 4 {
		t.Fatalf("spec.replicas after scale = %v, want 4", pool.Spec.Replicas)
	}
	scale = &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 11}}
	err := testenv.Client().SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(scale))
	if err == nil || !strings.Contains(err.Error(), "spec.replicas must be between") {
		t.Fatalf("scaling above maxReplicas gave %v; want a refusal", err)
	}
}
