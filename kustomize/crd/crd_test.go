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
	if len(crds) != 8 {
		t.Fatalf("want 8 CRDs (5 hypervisor, 1 cyberdesk, 2 hourglass), got %d", len(crds))
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
			if (v.Subresources == nil || v.Subresources.Status == nil) && !crd.IsRecord(c.Name) {
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
				if _, ok := status.Properties[cond]; !ok && !crd.IsRecord(c.Name) {
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
	hmtKubeVirtForStandby = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: HypervisorMachineTemplate
metadata: {name: x}
spec:
  clusterRef: {name: kv}
  kubevirt:
    virtualMachine: {}
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
		{"reserved cluster tag", hvcProxmox, []string{"spec.proxmox.tags", "[lab, hyperfleet]"}, "spec.proxmox.tags[1]: Invalid value: \"hyperfleet\": the tag hyperfleet and tags starting with hf- are reserved"},
		{"owner tag in cluster tags", hvcProxmox, []string{"spec.proxmox.tags", "[hf-owner-1234]"}, "spec.proxmox.tags[0]: Invalid value: \"hf-owner-1234\": the tag hyperfleet and tags starting with hf- are reserved"},
		{"bad node name in a list", hvcProxmox, []string{"spec.proxmox.nodes", "[pve1, \"pve 2\"]"}, "spec.proxmox.nodes[1] in body should match"},
		{"reserved kubevirt label", hvcProxmox, []string{"spec.provider", "kubevirt", "spec.proxmox", "-", "spec.kubevirt", "{labels: {hyperfleet.io/owner-uid: x}}"}, "keys under hyperfleet.io/ are reserved"},
		{"kubevirt label value not a label value", hvcProxmox, []string{"spec.provider", "kubevirt", "spec.proxmox", "-", "spec.kubevirt", "{labels: {team: \"a b\"}}"}, "spec.kubevirt.labels.team in body should match"},
		{"kubevirt namespace not a name", hvcProxmox, []string{"spec.provider", "kubevirt", "spec.proxmox", "-", "spec.kubevirt", "{namespace: ../kube-system}"}, "spec.kubevirt.namespace in body should match"},
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
		{"reserved template tag", hmtProxmox, []string{"spec.proxmox.tags", "[ci, hf-inst-other]"}, "spec.proxmox.tags[1]: Invalid value: \"hf-inst-other\": the tag hyperfleet and tags starting with hf- are reserved"},
		{"kubevirt without a VM template", hmtProxmox, []string{"spec.proxmox", "-", "spec.kubevirt", "{runStrategy: Always}"}, "spec.kubevirt needs exactly one of virtualMachine (inline) or templateConfigMapRef"},
		// MachineClaim
		{"claim without template", mcBasic, []string{"spec.templateRef", "-"}, "spec.templateRef: Required value"},
		{"claim with a bad hostname", mcBasic, []string{"spec.hostname", "Not_A_Host"}, "spec.hostname in body should match"},
		{"claim naming a desk without its group", mcBasic, []string{"spec.templateRef", "{kind: Cyberdesk, name: d}"}, "kind Cyberdesk needs apiGroup cyberdesk.io"},
		{"claim naming a template in the desk group", mcBasic, []string{"spec.templateRef", "{apiGroup: cyberdesk.io, name: t}"}, "kind HypervisorMachineTemplate (the default) is in apiGroup hypervisor.hyperfleet.io"},
		{"claim naming an unknown kind", mcBasic, []string{"spec.templateRef", "{apiGroup: cyberdesk.io, kind: Pod, name: t}"}, `spec.templateRef.kind: Unsupported value: "Pod"`},
		// RunnerPool
		{"min above max", rpRepo, []string{"spec.minReplicas", "5", "spec.maxReplicas", "2"}, "spec.minReplicas must be less than or equal to spec.maxReplicas"},
		{"repository without owner", rpRepo, []string{"spec.github.owner", "-"}, "spec.github.repository requires spec.github.owner"},
		{"neither repository nor organization", rpRepo, []string{"spec.github.repository", "-"}, "spec.github needs owner and repository, or organization"},
		{"replicas above max", rpRepo, []string{"spec.maxReplicas", "3", "spec.replicas", "4"}, "spec.replicas must be between spec.minReplicas and spec.maxReplicas"},
		{"runner label with a comma", rpRepo, []string{"spec.labels", "[linux, \"gpu,arm64\"]"}, "spec.labels[1] in body should match"},
		{"empty runner label", rpRepo, []string{"spec.labels", "[linux, \"\"]"}, "spec.labels[1] in body should be at least 1 chars long"},
		{"unknown registration method", rpRepo, []string{"spec.registrationMethod", "PAT"}, `spec.registrationMethod: Unsupported value: "PAT"`},
		{"scale set with registration tokens", rpRepo, []string{"spec.github.scaleSet", "{name: linux}", "spec.registrationMethod", "RegistrationToken"}, "spec.registrationMethod must be JITConfig with spec.github.scaleSet"},
		{"scale set with webhook scaling", rpRepo, []string{"spec.github.scaleSet", "{name: linux}", "spec.webhookScaling", "{enabled: true}"}, "spec.webhookScaling cannot be set with spec.github.scaleSet"},
		{"scale set without a name", rpRepo, []string{"spec.github.scaleSet", "{}"}, "spec.github.scaleSet.name: Required value"},
		{"scale set name with a space", rpRepo, []string{"spec.github.scaleSet", "{name: \"my set\"}"}, "spec.github.scaleSet.name in body should match"},
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
			wantRefused(t, obj, tc.want)
		})
	}
}

// wantRefused creates obj and fails t unless the API server refuses it with
// a message containing want.
func wantRefused(t *testing.T, obj client.Object, want string) {
	t.Helper()
	err := testenv.Client().Create(context.Background(), obj)
	if err == nil {
		t.Fatalf("accepted; want refusal containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("refused with\n  %v\nwant the message to contain\n  %q", err, want)
	}
}

// Each field that places machines or chooses a pool's scope is checked for
// set (absent → present), change and unset (present → absent): a rule on
// the field alone lets the first and the last through.
func TestFieldsThatWouldOrphanAMachineAreImmutable(t *testing.T) {
	const hvcKubeVirt = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: HypervisorCluster
metadata: {name: x}
spec:
  provider: kubevirt
`
	const rpOrg = `apiVersion: hypervisor.hyperfleet.io/v1alpha1
kind: RunnerPool
metadata: {name: x}
spec:
  templateRef: {name: t}
  github:
    organization: acme
    credentialsRef: {name: gh}
`
	cases := []struct {
		name   string
		obj    string
		start  []string
		change []string
		want   string
	}{
		{"cluster provider", hvcProxmox, nil, []string{"spec.provider", "kubevirt", "spec.proxmox", "-"}, "spec.provider is immutable"},
		{"cluster endpoint changed", hvcProxmox, nil, []string{"spec.endpoint", "https://other:8006/api2/json"}, "spec.endpoint is immutable"},
		{"cluster endpoint set", hvcKubeVirt, nil, []string{"spec.endpoint", "https://other:6443"}, "spec.endpoint is immutable"},
		{"cluster endpoint unset", hvcKubeVirt, []string{"spec.endpoint", "https://other:6443"}, []string{"spec.endpoint", "-"}, "spec.endpoint is immutable"},
		{"kubevirt credentials changed", hvcKubeVirt, []string{"spec.credentialsRef", "{name: remote}"}, []string{"spec.credentialsRef.name", "other"}, "spec.credentialsRef is immutable"},
		{"cluster credentials set", hvcKubeVirt, nil, []string{"spec.credentialsRef", "{name: remote}"}, "spec.credentialsRef is immutable"},
		{"cluster credentials unset", hvcKubeVirt, []string{"spec.credentialsRef", "{name: remote}"}, []string{"spec.credentialsRef", "-"}, "spec.credentialsRef is immutable"},
		{"kubevirt namespace changed", hvcKubeVirt, []string{"spec.kubevirt", "{namespace: vms}"}, []string{"spec.kubevirt", "{namespace: other}"}, "spec.kubevirt.namespace is immutable"},
		{"kubevirt namespace set", hvcKubeVirt, []string{"spec.kubevirt", "{}"}, []string{"spec.kubevirt", "{namespace: vms}"}, "spec.kubevirt.namespace is immutable"},
		{"kubevirt namespace set with its section", hvcKubeVirt, nil, []string{"spec.kubevirt", "{namespace: vms}"}, "spec.kubevirt.namespace is immutable"},
		{"kubevirt namespace unset", hvcKubeVirt, []string{"spec.kubevirt", "{namespace: vms}"}, []string{"spec.kubevirt", "-"}, "spec.kubevirt.namespace is immutable"},
		{"template cluster", hmtProxmox, nil, []string{"spec.clusterRef.name", "other"}, "spec.clusterRef is immutable"},
		{"claim template", mcBasic, nil, []string{"spec.templateRef.name", "other"}, "spec.templateRef is immutable"},
		{"claim machine name changed", mcBasic, []string{"spec.machineName", "desk-a"}, []string{"spec.machineName", "desk-b"}, "spec.machineName is immutable"},
		{"claim machine name set", mcBasic, nil, []string{"spec.machineName", "desk-a"}, "spec.machineName is immutable"},
		{"claim machine name unset", mcBasic, []string{"spec.machineName", "desk-a"}, []string{"spec.machineName", "-"}, "spec.machineName is immutable"},
		{"pool repository", rpRepo, nil, []string{"spec.github.repository", "other"}, "spec.github.repository is immutable"},
		{"pool owner", rpRepo, nil, []string{"spec.github.owner", "other"}, "spec.github.owner is immutable"},
		{"pool organization", rpOrg, nil, []string{"spec.github.organization", "other"}, "spec.github.organization is immutable"},
		{"pool repository set on an organization pool", rpOrg, nil, []string{"spec.github.owner", "acme", "spec.github.repository", "app"}, "spec.github.owner is immutable"},
		{"pool organization set on a repository pool", rpRepo, nil, []string{"spec.github.organization", "acme"}, "spec.github.organization is immutable"},
		{"pool organization unset", rpRepo, []string{"spec.github.organization", "acme"}, []string{"spec.github.organization", "-"}, "spec.github.organization is immutable"},
		{"pool repository and owner unset", rpOrg, []string{"spec.github.owner", "acme", "spec.github.repository", "app"}, []string{"spec.github.owner", "-", "spec.github.repository", "-"}, "spec.github.repository is immutable"},
		{"pool API URL changed", rpRepo, []string{"spec.github.apiURL", "https://ghe.example.com/api/v3/"}, []string{"spec.github.apiURL", "https://other.example.com/api/v3/"}, "spec.github.apiURL is immutable"},
		{"pool API URL set", rpRepo, nil, []string{"spec.github.apiURL", "https://ghe.example.com/api/v3/"}, "spec.github.apiURL is immutable"},
		{"pool scale set set", rpRepo, nil, []string{"spec.github.scaleSet", "{name: linux}"}, "spec.github.scaleSet cannot be set or removed"},
		{"pool scale set removed", rpRepo, []string{"spec.github.scaleSet", "{name: linux}"}, []string{"spec.github.scaleSet", "-"}, "spec.github.scaleSet cannot be set or removed"},
		{"pool API URL unset", rpRepo, []string{"spec.github.apiURL", "https://ghe.example.com/api/v3/"}, []string{"spec.github.apiURL", "-"}, "spec.github.apiURL is immutable"},
	}
	ns := testenv.Namespace(t)
	ctx := context.Background()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := edit(t, tc.obj, tc.start...)
			obj.SetName(fmt.Sprintf("immutable-%d", i))
			obj.SetNamespace(ns)
			if err := testenv.Client().Create(ctx, obj); err != nil {
				t.Fatalf("creating: %v", err)
			}
			changed := edit(t, tc.obj, append(append([]string{}, tc.start...), tc.change...)...)
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
	if pool.Spec.MinReplicas != 0 || pool.Spec.MaxReplicas != 10 || pool.Spec.RegistrationMethod != hypervisorv1alpha1.JITConfig {
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

const (
	cdBasic = "apiVersion: cyberdesk.io/v1alpha1\nkind: Cyberdesk\nmetadata: {name: x}\nspec: {}\n"
	// runnerWorkload and spireAttestation are the smallest valid sections
	// holding the template's two durations, so a case changes one field only.
	runnerWorkload   = "{type: github-runner, githubRunner: {httpTimeout: %s}}"
	spireAttestation = "{method: join-token, spire: {serverAddress: 'spire:8081', trustDomain: example.org, tokenTTL: %s}}"
)

// A name of n characters, for the limits on names that become label values
// or VM names.
func longName(n int) string { return strings.Repeat("a", n) }

// Every value the operator cannot use is refused by the API server, so that
// one object can never stop a reconciler (a MachineClaim with timeout: 3d
// used to break the claim cache for every tenant). For each rule added for
// that, one value on each side that breaks it, and the message names the
// field. A duration in units Go cannot parse fails the pattern; one out of
// range fails the CEL rule, whose message gives the range.
func TestOutOfRangeValuesAreRefusedNamingTheField(t *testing.T) {
	cases := []struct {
		name    string
		obj     string
		setName string // metadata.name, when the case is about the name
		edits   []string
		want    string
	}{
		// HypervisorCluster
		{"health check in days", hvcProxmox, "", []string{"spec.healthCheckInterval", "1d"}, "spec.healthCheckInterval in body should match"},
		{"health check under a second", hvcProxmox, "", []string{"spec.healthCheckInterval", "500ms"}, "spec.healthCheckInterval must be a duration between 1s and 24h"},
		{"health check over a day", hvcProxmox, "", []string{"spec.healthCheckInterval", "25h"}, "spec.healthCheckInterval must be a duration between 1s and 24h"},
		{"task timeout in days", hvcProxmox, "", []string{"spec.proxmox.taskTimeout", "1d"}, "spec.proxmox.taskTimeout in body should match"},
		{"task timeout under 10s", hvcProxmox, "", []string{"spec.proxmox.taskTimeout", "9s"}, "spec.proxmox.taskTimeout must be a duration between 10s and 24h"},
		{"task timeout over a day", hvcProxmox, "", []string{"spec.proxmox.taskTimeout", "24h1s"}, "spec.proxmox.taskTimeout must be a duration between 10s and 24h"},
		{"clone concurrency per node too high", hvcProxmox, "", []string{"spec.proxmox.maxConcurrentClonesPerNode", "65"}, "spec.proxmox.maxConcurrentClonesPerNode: Invalid value: 65"},
		{"clone concurrency per storage zero", hvcProxmox, "", []string{"spec.proxmox.maxConcurrentClonesPerStorage", "0"}, "spec.proxmox.maxConcurrentClonesPerStorage: Invalid value: 0"},
		{"clone concurrency per storage too high", hvcProxmox, "", []string{"spec.proxmox.maxConcurrentClonesPerStorage", "65"}, "spec.proxmox.maxConcurrentClonesPerStorage: Invalid value: 65"},
		// HypervisorMachineTemplate
		{"agent http timeout with a space", hmtProxmox, "", []string{"spec.workload", fmt.Sprintf(runnerWorkload, "'30 s'")}, "spec.workload.githubRunner.httpTimeout in body should match"},
		{"agent http timeout zero", hmtProxmox, "", []string{"spec.workload", fmt.Sprintf(runnerWorkload, "0s")}, "spec.workload.githubRunner.httpTimeout must be a duration between 1s and 10m"},
		{"agent http timeout over 10m", hmtProxmox, "", []string{"spec.workload", fmt.Sprintf(runnerWorkload, "11m")}, "spec.workload.githubRunner.httpTimeout must be a duration between 1s and 10m"},
		{"join token TTL in minutes spelt out", hmtProxmox, "", []string{"spec.attestation", fmt.Sprintf(spireAttestation, "10min")}, "spec.attestation.spire.tokenTTL in body should match"},
		{"join token TTL under a minute", hmtProxmox, "", []string{"spec.attestation", fmt.Sprintf(spireAttestation, "59s")}, "spec.attestation.spire.tokenTTL must be a duration between 1m and 24h"},
		{"join token TTL over a day", hmtProxmox, "", []string{"spec.attestation", fmt.Sprintf(spireAttestation, "48h")}, "spec.attestation.spire.tokenTTL must be a duration between 1m and 24h"},
		{"memory above 16Ti", hmtProxmox, "", []string{"spec.resources", "{memory: 17Ti}"}, "spec.resources.memory must be at most 16Ti"},
		{"disk below 1Gi", hmtProxmox, "", []string{"spec.resources", "{diskSize: 512Mi}"}, "spec.resources.diskSize must be at least 1Gi"},
		{"disk above 1Pi", hmtProxmox, "", []string{"spec.resources", "{diskSize: 2Pi}"}, "spec.resources.diskSize must be at most 1Pi"},
		{"more than 100 hot standby machines", hmtProxmox, "", []string{"spec.standby", "{hot: 101}"}, "spec.standby.hot: Invalid value: 101: spec.standby.hot in body should be less than or equal to 100"},
		{"negative hot standby machines", hmtProxmox, "", []string{"spec.standby", "{hot: -1}"}, "spec.standby.hot in body should be greater than or equal to 0"},
		{"standby max age in days", hmtProxmox, "", []string{"spec.standby", "{hot: 1, maxAge: 2d}"}, "spec.standby.maxAge in body should match"},
		{"standby max age under 10m", hmtProxmox, "", []string{"spec.standby", "{hot: 1, maxAge: 5m}"}, "spec.standby.maxAge must be a duration between 10m and 720h (30 days)"},
		{"standby schedule above 100", hmtProxmox, "", []string{"spec.standby", "{schedules: [{name: day, start: '0 8 * * *', hot: 101}]}"}, "spec.standby.schedules[0].hot: Invalid value: 101"},
		{"standby schedule without a name", hmtProxmox, "", []string{"spec.standby", "{schedules: [{start: '0 8 * * *', hot: 1}]}"}, "spec.standby.schedules[0].name: Required value"},
		{"burst headroom half-life under a minute", hmtProxmox, "", []string{"spec.standby", "{burstHeadroom: {max: 5, halfLife: 30s}}"}, "spec.standby.burstHeadroom.halfLife must be a duration between 1m and 24h"},
		{"more than 100 warm standby machines", hmtProxmox, "", []string{"spec.standby", "{warm: 101}"}, "spec.standby.warm: Invalid value: 101: spec.standby.warm in body should be less than or equal to 100"},
		{"warm standby machines on KubeVirt", hmtKubeVirtForStandby, "", []string{"spec.standby", "{warm: 1}"}, "spec.standby.warm is for Proxmox templates"},
		{"burst headroom without max", hmtProxmox, "", []string{"spec.standby", "{burstHeadroom: {halfLife: 30m}}"}, "spec.standby.burstHeadroom.max: Required value"},
		{"zero cores", hmtProxmox, "", []string{"spec.resources", "{cpuCores: 0}"}, "spec.resources.cpuCores: Invalid value: 0"},
		{"too many cores", hmtProxmox, "", []string{"spec.resources", "{cpuCores: 513}"}, "spec.resources.cpuCores: Invalid value: 513"},
		{"zero sockets", hmtProxmox, "", []string{"spec.resources", "{cpuSockets: 0}"}, "spec.resources.cpuSockets: Invalid value: 0"},
		{"too many sockets", hmtProxmox, "", []string{"spec.resources", "{cpuSockets: 17}"}, "spec.resources.cpuSockets: Invalid value: 17"},
		{"VLAN zero", hmtProxmox, "", []string{"spec.network", "{vlanTag: 0}"}, "spec.network.vlanTag: Invalid value: 0"},
		{"VLAN above 4094", hmtProxmox, "", []string{"spec.network", "{vlanTag: 4095}"}, "spec.network.vlanTag: Invalid value: 4095"},
		{"source vmid above the Proxmox range", hmtProxmox, "", []string{"spec.proxmox.source", "{vmid: 1000000000}"}, "spec.proxmox.source.vmid: Invalid value: 1000000000"},
		// MachineClaim
		{"claim timeout in days", mcBasic, "", []string{"spec.timeout", "3d"}, "spec.timeout in body should match"},
		{"claim timeout zero", mcBasic, "", []string{"spec.timeout", "0s"}, "spec.timeout must be a duration between 1s and 8760h (365 days)"},
		{"claim timeout over a year", mcBasic, "", []string{"spec.timeout", "8761h"}, "spec.timeout must be a duration between 1s and 8760h (365 days)"},
		{"claim max lifetime negative", mcBasic, "", []string{"spec.maxLifetime", "-1h"}, "spec.maxLifetime in body should match"},
		{"claim max lifetime under a minute", mcBasic, "", []string{"spec.maxLifetime", "30s"}, "spec.maxLifetime must be a duration between 1m and 8760h (365 days)"},
		{"claim max lifetime over a year", mcBasic, "", []string{"spec.maxLifetime", "9000h"}, "spec.maxLifetime must be a duration between 1m and 8760h (365 days)"},
		{"provisioning timeout in weeks", mcBasic, "", []string{"spec.provisioningTimeout", "1w"}, "spec.provisioningTimeout in body should match"},
		{"provisioning timeout under a minute", mcBasic, "", []string{"spec.provisioningTimeout", "59s"}, "spec.provisioningTimeout must be a duration between 1m and 24h"},
		{"provisioning timeout over a day", mcBasic, "", []string{"spec.provisioningTimeout", "25h"}, "spec.provisioningTimeout must be a duration between 1m and 24h"},
		// RunnerPool
		{"pool name longer than a label value", rpRepo, longName(64), nil, "a RunnerPool name may be at most 63 characters"},
		{"negative min replicas", rpRepo, "", []string{"spec.minReplicas", "-1"}, "spec.minReplicas: Invalid value: -1"},
		{"min replicas above 10000", rpRepo, "", []string{"spec.minReplicas", "10001", "spec.maxReplicas", "10000"}, "spec.minReplicas: Invalid value: 10001"},
		{"zero max replicas", rpRepo, "", []string{"spec.maxReplicas", "0"}, "spec.maxReplicas: Invalid value: 0"},
		{"max replicas above 10000", rpRepo, "", []string{"spec.maxReplicas", "10001"}, "spec.maxReplicas: Invalid value: 10001"},
		{"negative replicas", rpRepo, "", []string{"spec.replicas", "-1"}, "spec.replicas: Invalid value: -1"},
		{"replicas above 10000", rpRepo, "", []string{"spec.maxReplicas", "10000", "spec.replicas", "10001"}, "spec.replicas: Invalid value: 10001"},
		{"idle TTL negative", rpRepo, "", []string{"spec.idleTTL", "-1s"}, "spec.idleTTL in body should match"},
		{"idle TTL over a week", rpRepo, "", []string{"spec.idleTTL", "169h"}, "spec.idleTTL must be a duration between 0s and 168h (7 days)"},
		{"runner max lifetime in days", rpRepo, "", []string{"spec.maxLifetime", "2d"}, "spec.maxLifetime in body should match"},
		{"runner max lifetime under a minute", rpRepo, "", []string{"spec.maxLifetime", "59s"}, "spec.maxLifetime must be a duration between 1m and 8760h (365 days)"},
		{"runner max lifetime over a year", rpRepo, "", []string{"spec.maxLifetime", "8761h"}, "spec.maxLifetime must be a duration between 1m and 8760h (365 days)"},
		{"registration timeout as a bare number", rpRepo, "", []string{"spec.registrationTimeout", "'900'"}, "spec.registrationTimeout in body should match"},
		{"registration timeout zero", rpRepo, "", []string{"spec.registrationTimeout", "0s"}, "spec.registrationTimeout must be a duration between 30s and 24h"},
		{"registration timeout under 30s", rpRepo, "", []string{"spec.registrationTimeout", "29s"}, "spec.registrationTimeout must be a duration between 30s and 24h"},
		{"registration timeout over a day", rpRepo, "", []string{"spec.registrationTimeout", "25h"}, "spec.registrationTimeout must be a duration between 30s and 24h"},
		{"poll interval in days", rpRepo, "", []string{"spec.webhookScaling", "{pollInterval: 1d}"}, "spec.webhookScaling.pollInterval in body should match"},
		{"poll interval of a millisecond", rpRepo, "", []string{"spec.webhookScaling", "{pollInterval: 1ms}"}, "spec.webhookScaling.pollInterval must be 0s (off) or a duration between 10s and 24h"},
		{"poll interval under 10s", rpRepo, "", []string{"spec.webhookScaling", "{pollInterval: 9s}"}, "spec.webhookScaling.pollInterval must be 0s (off) or a duration between 10s and 24h"},
		{"poll interval over a day", rpRepo, "", []string{"spec.webhookScaling", "{pollInterval: 25h}"}, "spec.webhookScaling.pollInterval must be 0s (off) or a duration between 10s and 24h"},
		// Cyberdesk
		{"desk name longer than its VM name allows", cdBasic, longName(54), nil, "a Cyberdesk name may be at most 53 characters"},
		{"desk timeout over a year", cdBasic, "", []string{"spec.timeoutMs", "31536000001"}, "spec.timeoutMs in body should be less than or equal to 31536000000"},
		{"desk timeout that overflowed time.Duration", cdBasic, "", []string{"spec.timeoutMs", "9300000000000"}, "spec.timeoutMs in body should be less than or equal to 31536000000"},
		// HourglassExecutor
		{"executor name longer than a label value", hgeBasic, longName(64), nil, "metadata.name must be a DNS label of at most 63 characters"},
		{"executor name not a DNS label", hgeBasic, "Executor_1", nil, "metadata.name must be a DNS label of at most 63 characters"},
		{"chain id above EIP-2294", hgeBasic, "", []string{"spec.chains", `[{name: eth, chainId: 4503599627370477, rpcURL: "https://eth", taskMailboxAddress: "0x2222222222222222222222222222222222222222"}]`}, "spec.chains[0].chainId: Invalid value: 4503599627370477"},
		{"negative executor replicas", hgeBasic, "", []string{"spec.replicas", "-1"}, "spec.replicas: Invalid value: -1"},
		{"executor replicas above 100", hgeBasic, "", []string{"spec.replicas", "101"}, "spec.replicas: Invalid value: 101"},
		// Performer
		{"performer name longer than its Service name allows", perfBasic, longName(54), nil, "metadata.name must be a DNS label of at most 53 characters"},
		{"grpc port zero", perfBasic, "", []string{"spec.config", "{grpcPort: 0}"}, "spec.config.grpcPort: Invalid value: 0"},
		{"negative GPU count", perfBasic, "", []string{"spec.hardwareRequirements", "{gpuCount: -1}"}, "spec.hardwareRequirements.gpuCount: Invalid value: -1"},
		{"more than 16 GPUs", perfBasic, "", []string{"spec.hardwareRequirements", "{gpuType: nvidia-a100, gpuCount: 17}"}, "spec.hardwareRequirements.gpuCount: Invalid value: 17"},
	}
	ns := testenv.Namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := edit(t, tc.obj, tc.edits...)
			obj.SetName(fmt.Sprintf("out-of-range-%d", i))
			if tc.setName != "" {
				obj.SetName(tc.setName)
			}
			obj.SetNamespace(ns)
			wantRefused(t, obj, tc.want)
		})
	}
}

// The bounds themselves, and every spelling Go's time.ParseDuration reads,
// are accepted: the rules refuse only what the operator cannot use.
func TestValuesAtTheBoundsAreAccepted(t *testing.T) {
	cases := []struct {
		name    string
		obj     string
		setName string
		edits   []string
	}{
		{"cluster at the lower bounds", hvcProxmox, "", []string{"spec.healthCheckInterval", "1s", "spec.proxmox.taskTimeout", "10s"}},
		{"cluster at the upper bounds", hvcProxmox, "", []string{"spec.healthCheckInterval", "24h", "spec.proxmox.taskTimeout", "1440m"}},
		{"template at the lower bounds", hmtProxmox, "", []string{"spec.workload", fmt.Sprintf(runnerWorkload, "1s"), "spec.attestation", fmt.Sprintf(spireAttestation, "1m"),
			"spec.resources", "{memory: 128Mi, diskSize: 1Gi, cpuCores: 1, cpuSockets: 1}"}},
		{"template at the upper bounds", hmtProxmox, "", []string{"spec.workload", fmt.Sprintf(runnerWorkload, "10m"), "spec.attestation", fmt.Sprintf(spireAttestation, "24h"),
			"spec.resources", "{memory: 16Ti, diskSize: 1Pi, cpuCores: 512, cpuSockets: 16}"}},
		{"claim at the lower bounds", mcBasic, "", []string{"spec.timeout", "1s", "spec.maxLifetime", "1m", "spec.provisioningTimeout", "60s"}},
		{"claim at the upper bounds, fractions and compound units", mcBasic, "", []string{"spec.timeout", "8760h", "spec.maxLifetime", "8759h59m60s", "spec.provisioningTimeout", "23.5h"}},
		{"pool at the lower bounds", rpRepo, longName(63), []string{"spec.idleTTL", "0s", "spec.maxLifetime", "1m", "spec.registrationTimeout", "30s", "spec.webhookScaling", "{pollInterval: 10s}"}},
		{"pool with polling off", rpRepo, "", []string{"spec.webhookScaling", "{pollInterval: 0s}"}},
		{"pool at the upper bounds", rpRepo, "", []string{"spec.idleTTL", "168h", "spec.maxLifetime", "8760h", "spec.registrationTimeout", "24h",
			"spec.webhookScaling", "{pollInterval: 24h}", "spec.maxReplicas", "10000", "spec.replicas", "10000"}},
		{"desk at the bounds", cdBasic, longName(53), []string{"spec.timeoutMs", "31536000000"}},
		{"executor at the bounds", hgeBasic, longName(63), []string{"spec.chains", `[{name: eth, chainId: 4503599627370476, rpcURL: "https://eth", taskMailboxAddress: "0x2222222222222222222222222222222222222222"}]`}},
		{"performer at the bounds", perfBasic, longName(53), []string{"spec.hardwareRequirements", "{gpuType: nvidia-a100, gpuCount: 16}"}},
	}
	ns := testenv.Namespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := edit(t, tc.obj, tc.edits...)
			obj.SetName(fmt.Sprintf("in-range-%d", i))
			if tc.setName != "" {
				obj.SetName(tc.setName)
			}
			obj.SetNamespace(ns)
			if err := testenv.Client().Create(context.Background(), obj); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

// The case, on its own: a MachineClaim with timeout: 3d is refused
// when it is written (it used to be stored, and then no MachineClaim of any
// tenant could be listed), and the refusal tells the user how to write it.
func TestMachineClaimTimeoutInDaysIsRefused(t *testing.T) {
	obj := edit(t, mcBasic, "spec.timeout", "3d")
	obj.SetNamespace(testenv.Namespace(t))
	err := testenv.Client().Create(context.Background(), obj)
	if err == nil {
		t.Fatal("a MachineClaim with spec.timeout: 3d was accepted")
	}
	for _, want := range []string{`spec.timeout: Invalid value: "3d"`, "e.g. 72h for three days"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refused with\n  %v\nwant the message to contain\n  %q", err, want)
		}
	}
}
