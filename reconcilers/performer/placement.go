package performer

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// Placement is the table that turns a Performer's hardwareRequirements into
// real scheduling: which node labels, taints and runtime class mean "a GPU of
// this type" or "an SGX enclave". Clusters label their hardware differently,
// so the operator's configuration can override it (LoadPlacement).
type Placement struct {
	// GPU places performers that ask for GPUs.
	GPU GPUPlacement `json:"gpu"`
	// TEE maps each trusted-execution type to its placement. A type missing
	// from the table cannot be placed: such Performers are Stalled.
	TEE map[hourglassv1alpha1.TEEType]TEEPlacement `json:"tee"`
}

// GPUPlacement places GPU performers.
type GPUPlacement struct {
	// ResourceName is the extended resource gpuCount becomes a limit of.
	ResourceName corev1.ResourceName `json:"resourceName,omitempty"`
	// NodeLabel is the node label whose value must equal gpuType, unless
	// Types maps the gpuType to its own node selector.
	NodeLabel string `json:"nodeLabel,omitempty"`
	// Types maps a gpuType to the node selector that finds it, for clusters
	// whose labels do not carry the gpuType verbatim (nvidia-a100 →
	// cloud.google.com/gke-accelerator: nvidia-tesla-a100).
	Types map[string]map[string]string `json:"types,omitempty"`
	// Tolerations added to GPU performers (GPU nodes are commonly tainted).
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// TEEPlacement places performers needing one trusted-execution type.
type TEEPlacement struct {
	NodeSelector     map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations      []corev1.Toleration `json:"tolerations,omitempty"`
	RuntimeClassName string              `json:"runtimeClassName,omitempty"`
}

// DefaultPlacement is the built-in table. The labels are those the NVIDIA GPU
// operator (GPU feature discovery), Intel's device plugins and Node Feature
// Discovery put on nodes; the runtime classes are Confidential Containers'.
func DefaultPlacement() Placement {
	noSchedule := func(key, value string) corev1.Toleration {
		return corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: corev1.TaintEffectNoSchedule}
	}
	return Placement{
		GPU: GPUPlacement{
			ResourceName: "nvidia.com/gpu",
			NodeLabel:    "nvidia.com/gpu.product",
			Tolerations:  []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		TEE: map[hourglassv1alpha1.TEEType]TEEPlacement{
			"sgx": {
				NodeSelector: map[string]string{"intel.feature.node.kubernetes.io/sgx": "true"},
				Tolerations:  []corev1.Toleration{noSchedule("sgx", "enabled")},
			},
			"sev": {
				NodeSelector:     map[string]string{"feature.node.kubernetes.io/cpu-security.sev.snp.enabled": "true"},
				Tolerations:      []corev1.Toleration{noSchedule("sev", "enabled")},
				RuntimeClassName: "kata-qemu-snp",
			},
			"tdx": {
				NodeSelector:     map[string]string{"feature.node.kubernetes.io/cpu-security.tdx.enabled": "true"},
				Tolerations:      []corev1.Toleration{noSchedule("tdx", "enabled")},
				RuntimeClassName: "kata-qemu-tdx",
			},
		},
	}
}

// placementFile is the override file's shape: a section that is present
// replaces the built-in one (tee as a whole table, gpu field by field); a
// section that is absent keeps the built-in one.
type placementFile struct {
	GPU *GPUPlacement                              `json:"gpu,omitempty"`
	TEE map[hourglassv1alpha1.TEEType]TEEPlacement `json:"tee,omitempty"`
}

// LoadPlacement reads the override file at path over the defaults; an empty
// path gives the defaults. Errors name the file and the bad entry, so a
// mistake stops the operator at start rather than misplacing workloads.
func LoadPlacement(path string) (Placement, error) {
	p := DefaultPlacement()
	if path == "" {
		return p, nil
	}
	data, err := os.ReadFile(path) //nolint:gosec // the path is the operator's own flag
	if err != nil {
		return p, fmt.Errorf("reading the placement file: %w", err)
	}
	p, err = ParsePlacement(data)
	if err != nil {
		return p, fmt.Errorf("placement file %s: %w", path, err)
	}
	return p, nil
}

// ParsePlacement applies an override document over the defaults.
func ParsePlacement(data []byte) (Placement, error) {
	p := DefaultPlacement()
	var f placementFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return p, err
	}
	if f.GPU != nil {
		if f.GPU.ResourceName != "" {
			p.GPU.ResourceName = f.GPU.ResourceName
		}
		if f.GPU.NodeLabel != "" {
			p.GPU.NodeLabel = f.GPU.NodeLabel
		}
		if f.GPU.Types != nil {
			p.GPU.Types = f.GPU.Types
		}
		if f.GPU.Tolerations != nil {
			p.GPU.Tolerations = f.GPU.Tolerations
		}
	}
	if f.TEE != nil {
		p.TEE = f.TEE
	}
	return p, p.Validate()
}

// Validate checks every label, toleration and runtime class in the table.
func (p Placement) Validate() error {
	var errs []error
	if msgs := validation.IsQualifiedName(string(p.GPU.ResourceName)); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("gpu.resourceName %q: %s", p.GPU.ResourceName, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsQualifiedName(p.GPU.NodeLabel); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("gpu.nodeLabel %q: %s", p.GPU.NodeLabel, strings.Join(msgs, "; ")))
	}
	for _, t := range sortedKeys(p.GPU.Types) {
		errs = append(errs, validateSelector("gpu.types."+t, p.GPU.Types[t])...)
	}
	errs = append(errs, validateTolerations("gpu.tolerations", p.GPU.Tolerations)...)
	for _, t := range sortedKeys(p.TEE) {
		field := "tee." + string(t)
		switch t {
		case "sgx", "sev", "tdx":
		default:
			errs = append(errs, fmt.Errorf("%s: unknown TEE type (known: sgx, sev, tdx)", field))
		}
		e := p.TEE[t]
		errs = append(errs, validateSelector(field+".nodeSelector", e.NodeSelector)...)
		errs = append(errs, validateTolerations(field+".tolerations", e.Tolerations)...)
		if e.RuntimeClassName != "" {
			if msgs := validation.IsDNS1123Subdomain(e.RuntimeClassName); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s.runtimeClassName %q: %s", field, e.RuntimeClassName, strings.Join(msgs, "; ")))
			}
		}
	}
	return errors.Join(errs...)
}

func validateSelector(field string, sel map[string]string) []error {
	var errs []error
	for _, k := range sortedKeys(sel) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: label key %q: %s", field, k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(sel[k]); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s[%s]: label value %q: %s", field, k, sel[k], strings.Join(msgs, "; ")))
		}
	}
	return errs
}

func validateTolerations(field string, ts []corev1.Toleration) []error {
	var errs []error
	for i, t := range ts {
		switch t.Operator {
		case corev1.TolerationOpExists, corev1.TolerationOpEqual, "":
		default:
			errs = append(errs, fmt.Errorf("%s[%d]: operator %q must be Equal or Exists", field, i, t.Operator))
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			errs = append(errs, fmt.Errorf("%s[%d]: effect %q must be NoSchedule, PreferNoSchedule or NoExecute", field, i, t.Effect))
		}
		if t.Key != "" {
			if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%s[%d]: key %q: %s", field, i, t.Key, strings.Join(msgs, "; ")))
			}
		}
	}
	return errs
}

// specError is a Performer spec the reconciler cannot act on; it becomes
// Stalled with its reason and message.
type specError struct {
	reason  string
	message string
}

func (e *specError) Error() string { return e.message }

// Reasons for specErrors.
const (
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonNoTEEMapping  = "NoTEEMapping"
	ReasonPlacementConf = "PlacementConflict"
)

// podPlacement is where a Performer's Pod goes and what it reserves.
type podPlacement struct {
	nodeSelector      map[string]string
	affinity          *corev1.Affinity
	tolerations       []corev1.Toleration
	runtimeClassName  *string
	priorityClassName string
	// gpu is the extended resource and count to limit, if any.
	gpuResource corev1.ResourceName
	gpuCount    int64
}

// resolve merges the Performer's own scheduling with what its hardware
// requirements mean in this table. The user's explicit scheduling is kept;
// a node selector the hardware needs that contradicts it is an error rather
// than a silent override, because either choice would surprise someone.
// An explicit runtimeClassName wins over the TEE mapping's: it is how a
// user picks another confidential runtime on the same nodes.
func (p Placement) resolve(perf *hourglassv1alpha1.Performer) (podPlacement, error) {
	var out podPlacement
	sources := map[string]string{} // selector key → where it came from, for messages
	add := func(source string, sel map[string]string) error {
		for _, k := range sortedKeys(sel) {
			v := sel[k]
			if old, ok := out.nodeSelector[k]; ok && old != v {
				return &specError{reason: ReasonPlacementConf, message: fmt.Sprintf(
					"node selector %s=%s from %s contradicts %s=%s from %s: remove one of them", k, v, source, k, old, sources[k])}
			}
			if out.nodeSelector == nil {
				out.nodeSelector = map[string]string{}
			}
			out.nodeSelector[k], sources[k] = v, source
		}
		return nil
	}
	if s := perf.Spec.Scheduling; s != nil {
		if err := add("spec.scheduling.nodeSelector", s.NodeSelector); err != nil {
			return out, err
		}
		out.affinity = s.Affinity.DeepCopy()
		out.tolerations = append(out.tolerations, s.Tolerations...)
		if rc := s.RuntimeClassFor(); rc != nil {
			out.runtimeClassName = ptr.To(*rc)
		}
		out.priorityClassName = s.PriorityClassName
	}
	hw := perf.Spec.HardwareRequirements
	if hw == nil {
		return out, nil
	}
	if errs := validateSelector("spec.hardwareRequirements.customLabels", hw.CustomLabels); len(errs) > 0 {
		return out, &specError{reason: ReasonInvalidSpec, message: errors.Join(errs...).Error()}
	}
	if err := add("spec.hardwareRequirements.customLabels", hw.CustomLabels); err != nil {
		return out, err
	}
	if hw.GPUCount > 0 || hw.GPUType != "" {
		if hw.GPUCount > 0 {
			out.gpuResource, out.gpuCount = p.GPU.ResourceName, int64(hw.GPUCount)
		}
		out.tolerations = append(out.tolerations, p.GPU.Tolerations...)
	}
	if hw.GPUType != "" {
		sel, ok := p.GPU.Types[hw.GPUType]
		if !ok {
			if msgs := validation.IsValidLabelValue(hw.GPUType); len(msgs) > 0 {
				return out, &specError{reason: ReasonInvalidSpec, message: fmt.Sprintf(
					"spec.hardwareRequirements.gpuType %q is not a valid node label value: %s", hw.GPUType, strings.Join(msgs, "; "))}
			}
			sel = map[string]string{p.GPU.NodeLabel: hw.GPUType}
		}
		if err := add(fmt.Sprintf("gpuType %s", hw.GPUType), sel); err != nil {
			return out, err
		}
	}
	if hw.TEERequired {
		if hw.TEEType == "" {
			return out, &specError{reason: ReasonInvalidSpec, message: "spec.hardwareRequirements.teeRequired is true but teeType is empty: set sgx, sev or tdx"}
		}
		tee, ok := p.TEE[hw.TEEType]
		if !ok {
			return out, &specError{reason: ReasonNoTEEMapping, message: fmt.Sprintf(
				"this operator has no placement for teeType %s (it knows %s): add %s to its placement file (--hourglass-placement-file) or choose another teeType",
				hw.TEEType, knownTEETypes(p), hw.TEEType)}
		}
		if err := add(fmt.Sprintf("the %s TEE mapping", hw.TEEType), tee.NodeSelector); err != nil {
			return out, err
		}
		out.tolerations = append(out.tolerations, tee.Tolerations...)
		if out.runtimeClassName == nil && tee.RuntimeClassName != "" {
			rc := tee.RuntimeClassName
			out.runtimeClassName = &rc
		}
	}
	out.tolerations = dedupeTolerations(out.tolerations)
	return out, nil
}

// applyGPU adds the GPU limit to resources, refusing a contradicting one the
// user set by hand. Requests of an extended resource must equal its limit,
// so a request is set alongside.
func (pp podPlacement) applyGPU(res *corev1.ResourceRequirements) error {
	if pp.gpuCount == 0 {
		return nil
	}
	want := *resource.NewQuantity(pp.gpuCount, resource.DecimalSI)
	for _, f := range []struct {
		field string
		list  corev1.ResourceList
	}{{"limits", res.Limits}, {"requests", res.Requests}} {
		if q, ok := f.list[pp.gpuResource]; ok && q.Cmp(want) != 0 {
			return &specError{reason: ReasonPlacementConf, message: fmt.Sprintf(
				"spec.resources.%s[%s] is %s but spec.hardwareRequirements.gpuCount is %d: set only gpuCount", f.field, pp.gpuResource, q.String(), pp.gpuCount)}
		}
	}
	if res.Limits == nil {
		res.Limits = corev1.ResourceList{}
	}
	res.Limits[pp.gpuResource] = want
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	res.Requests[pp.gpuResource] = want
	return nil
}

func knownTEETypes(p Placement) string {
	keys := sortedKeys(p.TEE)
	if len(keys) == 0 {
		return "none"
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

func dedupeTolerations(in []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range in {
		if !slices.ContainsFunc(out, func(o corev1.Toleration) bool { return equality.Semantic.DeepEqual(o, t) }) {
			out = append(out, t)
		}
	}
	return out
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}
