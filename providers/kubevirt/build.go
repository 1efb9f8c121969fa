package kubevirt

import (
	"encoding/base64"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hyperfleet/hyperfleet/providers"
)

// UserDataKey is the key of the cloud-init Secret that holds the user data,
// the key KubeVirt's cloudInitNoCloud secretRef reads.
const UserDataKey = "userdata"

// cloudInitVolume is the volume (and disk) added when a template has none.
const cloudInitVolume = "cloudinitdisk"

// secretName is the cloud-init Secret of a VirtualMachine.
func secretName(vm string) string { return vm + "-cloudinit" }

// CloudInitSecretName is the Secret, beside VM vm, whose UserDataKey holds
// the user data the guest boots with: what the stand-ins of the guest read.
func CloudInitSecretName(vm string) string { return secretName(vm) }

var secretGVK = corev1.SchemeGroupVersion.WithKind("Secret")

// desired is what Create makes: the VirtualMachine and, when the machine
// has user data, the Secret holding it.
type desired struct {
	vm     *kubevirtv1.VirtualMachine
	secret *corev1.Secret
	// notices say where the VM departs from the template (Machine.Notices).
	notices []string
}

// build renders spec's template and turns it into the VirtualMachine to
// create. Errors are the template's fault and say what to fix.
func (p *Provider) build(spec providers.MachineSpec, namespace string) (desired, error) {
	kv := spec.KubeVirt
	if kv == nil || len(kv.Template) == 0 {
		return desired{}, templateError("", "the machine has no VirtualMachine template: set spec.kubevirt.virtualMachine or spec.kubevirt.templateConfigMapRef on the HypervisorMachineTemplate")
	}
	userData := p.userData(spec)
	vars := make(map[string]string, len(BuiltinVariables)+len(kv.Variables))
	for k, v := range kv.Variables {
		vars[k] = v
	}
	// The provider's own values win: a caller cannot rename the machine
	// or its namespace through a variable.
	vars[VarVMName] = spec.Ref.Name
	vars[VarNamespace] = namespace
	vars[VarManagedBy] = p.cfg.ManagedBy
	vars[VarUserDataBase64] = base64.StdEncoding.EncodeToString([]byte(userData))
	text, err := Render(string(kv.Template), vars)
	if err != nil {
		return desired{}, templateError(kv.TemplateSource, err.Error())
	}
	vm := &kubevirtv1.VirtualMachine{}
	if err := yaml.UnmarshalStrict([]byte(text), vm); err != nil {
		return desired{}, templateError(kv.TemplateSource, "not a kubevirt.io/v1 VirtualMachine: "+err.Error())
	}
	if vm.Kind != "" && vm.Kind != "VirtualMachine" {
		return desired{}, templateError(kv.TemplateSource, fmt.Sprintf("kind is %q; the template must be a VirtualMachine", vm.Kind))
	}
	if vm.Spec.Template == nil {
		return desired{}, templateError(kv.TemplateSource, "spec.template (the VirtualMachineInstance template) is missing")
	}
	vm.APIVersion, vm.Kind = kubevirtv1.SchemeGroupVersion.String(), "VirtualMachine"
	var notices []string
	if vm.Namespace != "" && vm.Namespace != namespace {
		// A template may name a namespace of its own (one written for
		// another operator puts every VM in "kubevirt"). The VM stays
		// beside its owner instead: its cloud-init Secret,
		// the operator's RBAC and every tenant's cleanup are there.
		notices = append(notices, fmt.Sprintf("the template's metadata.namespace %q is not used: VirtualMachine %s is made in namespace %q, beside its owner; remove metadata.namespace from the template to silence this",
			vm.Namespace, spec.Ref.Name, namespace))
	}
	vm.Name, vm.Namespace, vm.GenerateName = spec.Ref.Name, namespace, ""
	vm.ResourceVersion, vm.UID = "", ""
	vm.Status = kubevirtv1.VirtualMachineStatus{}

	owned := p.ownershipLabels(spec.Owner)
	vm.Labels = merge(vm.Labels, p.cfg.Labels, kv.Labels, owned)
	vm.Annotations = merge(vm.Annotations, map[string]string{AnnotationOwner: spec.Owner.Namespace + "/" + spec.Owner.Name})
	tmpl := vm.Spec.Template
	tmpl.ObjectMeta.Labels = merge(tmpl.ObjectMeta.Labels, p.cfg.Labels, kv.Labels, owned)

	if kv.RunStrategy != "" {
		rs := kubevirtv1.VirtualMachineRunStrategy(kv.RunStrategy)
		vm.Spec.RunStrategy, vm.Spec.Running = &rs, nil
	}
	if vm.Spec.RunStrategy == nil && vm.Spec.Running == nil {
		rs := kubevirtv1.RunStrategyAlways
		vm.Spec.RunStrategy = &rs
	}
	if runStrategy(vm) == kubevirtv1.RunStrategyHalted {
		// running: false (KubeVirt's older field) reads as Halted too.
		return desired{}, templateError(kv.TemplateSource, "the VirtualMachine would never start: spec.running is false or spec.runStrategy is Halted; set spec.running: true in the template, or spec.kubevirt.runStrategy: RerunOnFailure on the HypervisorMachineTemplate")
	}
	if spec.Hostname != "" {
		tmpl.Spec.Hostname = spec.Hostname
	}
	sizeDomain(&tmpl.Spec, spec)

	out := desired{vm: vm, notices: notices}
	data, err := moveUserData(&tmpl.Spec, userData, secretName(vm.Name))
	if err != nil {
		return desired{}, templateError(kv.TemplateSource, err.Error())
	}
	if data != "" {
		out.secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: secretName(vm.Name), Namespace: namespace,
				Labels:      merge(nil, p.cfg.Labels, owned),
				Annotations: map[string]string{AnnotationOwner: spec.Owner.Namespace + "/" + spec.Owner.Name},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{UserDataKey: []byte(data)},
		}
	}
	return out, nil
}

// userData is the guest's cloud-init user data: the spec's own, or a small
// cloud-config from the user and SSH keys when only those are given.
func (p *Provider) userData(spec providers.MachineSpec) string {
	ci := spec.CloudInit
	if ci.UserData != "" {
		return ci.UserData
	}
	if ci.User == "" && len(ci.SSHAuthorizedKeys) == 0 && spec.Hostname == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	if spec.Hostname != "" {
		fmt.Fprintf(&b, "hostname: %s\n", spec.Hostname)
	}
	if ci.User != "" {
		fmt.Fprintf(&b, "user: %s\n", ci.User)
	}
	if len(ci.SSHAuthorizedKeys) > 0 {
		b.WriteString("ssh_authorized_keys:\n")
		for _, k := range ci.SSHAuthorizedKeys {
			fmt.Fprintf(&b, "  - %q\n", k)
		}
	}
	return b.String()
}

// moveUserData takes the user data out of the VM object — where anyone who
// may read VMs could see it — into the Secret: every cloudInitNoCloud or
// cloudInitConfigDrive volume's inline user data is replaced by a reference
// to secret. A template without a cloud-init volume gets one when there is
// user data. It returns the user data the Secret must hold ("" for none).
func moveUserData(spec *kubevirtv1.VirtualMachineInstanceSpec, userData, secret string) (string, error) {
	found := false
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		var ref **corev1.LocalObjectReference
		var plain, b64 *string
		switch {
		case v.CloudInitNoCloud != nil:
			src := v.CloudInitNoCloud
			ref, plain, b64 = &src.UserDataSecretRef, &src.UserData, &src.UserDataBase64
		case v.CloudInitConfigDrive != nil:
			src := v.CloudInitConfigDrive
			ref, plain, b64 = &src.UserDataSecretRef, &src.UserData, &src.UserDataBase64
		default:
			continue
		}
		inline, err := inlineUserData(*plain, *b64)
		if err != nil {
			return "", fmt.Errorf("volume %s: %w", v.Name, err)
		}
		if *ref != nil && inline == "" {
			if userData != "" {
				return "", fmt.Errorf("volume %s names its own user-data Secret %s, so the machine's user data has nowhere to go; remove its secretRef", v.Name, (*ref).Name)
			}
			return "", nil // the template brings its own Secret: leave it alone
		}
		if inline != "" {
			userData = inline
		}
		*plain, *b64 = "", ""
		*ref = &corev1.LocalObjectReference{Name: secret}
		found = true
	}
	switch {
	case found && userData == "":
		// The template wants cloud-init but there is nothing to say: an
		// empty cloud-config keeps the referenced Secret valid.
		return "#cloud-config\n", nil
	case found || userData == "":
		return userData, nil
	}
	spec.Volumes = append(spec.Volumes, kubevirtv1.Volume{
		Name: cloudInitVolume,
		VolumeSource: kubevirtv1.VolumeSource{CloudInitNoCloud: &kubevirtv1.CloudInitNoCloudSource{
			UserDataSecretRef: &corev1.LocalObjectReference{Name: secret},
		}},
	})
	for _, d := range spec.Domain.Devices.Disks {
		if d.Name == cloudInitVolume {
			return userData, nil // the template declared the disk, not the volume
		}
	}
	spec.Domain.Devices.Disks = append(spec.Domain.Devices.Disks, kubevirtv1.Disk{
		Name:       cloudInitVolume,
		DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}},
	})
	return userData, nil
}

func inlineUserData(plain, b64 string) (string, error) {
	if plain != "" {
		return plain, nil
	}
	if b64 == "" {
		return "", nil
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return "", fmt.Errorf("userDataBase64 is not valid base64: %w", err)
	}
	return string(data), nil
}

// sizeDomain applies the template's CPU and memory sizes over the VM
// template's own; zero keeps them.
func sizeDomain(spec *kubevirtv1.VirtualMachineInstanceSpec, s providers.MachineSpec) {
	d := &spec.Domain
	if s.CPUCores > 0 || s.CPUSockets > 0 {
		if d.CPU == nil {
			d.CPU = &kubevirtv1.CPU{}
		}
		if s.CPUCores > 0 {
			d.CPU.Cores = uint32(s.CPUCores) //nolint:gosec // validated small by the CRD schema
		}
		if s.CPUSockets > 0 {
			d.CPU.Sockets = uint32(s.CPUSockets) //nolint:gosec // validated small by the CRD schema
		}
	}
	if s.MemoryMiB > 0 {
		q := resource.NewQuantity(s.MemoryMiB<<20, resource.BinarySI)
		if d.Memory == nil {
			d.Memory = &kubevirtv1.Memory{}
		}
		d.Memory.Guest = q
		if d.Resources.Requests == nil {
			d.Resources.Requests = corev1.ResourceList{}
		}
		d.Resources.Requests[corev1.ResourceMemory] = *q
	}
}

func templateError(source, msg string) error {
	if source != "" {
		msg = source + ": " + msg
	}
	return providers.Permanent("TemplateInvalid", msg, nil)
}
