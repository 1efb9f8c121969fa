package performer

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
)

// Probe timings. The startup probe gives a slow starter (a GPU performer
// loading a model) up to five minutes before liveness applies, instead of a
// fixed initial delay that kills it in a loop; readiness is checked often so
// an upgrade switches over soon after the new Pod serves.
var (
	startupProbe   = probeTiming{period: 5, timeout: 2, failures: 60}
	livenessProbe  = probeTiming{period: 10, timeout: 5, failures: 3}
	readinessProbe = probeTiming{period: 5, timeout: 2, failures: 3}
)

type probeTiming struct{ period, timeout, failures int32 }

func (t probeTiming) grpc(port int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: port}},
		PeriodSeconds:    t.period,
		TimeoutSeconds:   t.timeout,
		FailureThreshold: t.failures,
		SuccessThreshold: 1,
	}
}

// desiredPod is the Pod a Performer should run now, and the hash of its spec
// that names its revision. It is a pure function of the Performer and the
// placement table, so the same spec always gives the same hash.
func desiredPod(p *hourglassv1alpha1.Performer, table Placement) (*corev1.Pod, string, error) {
	image := imageRef(p)
	pp, err := table.resolve(p)
	if err != nil {
		return nil, "", err
	}
	resources := p.Spec.Resources.DeepCopy()
	if err := pp.applyGPU(resources); err != nil {
		return nil, "", err
	}
	port := GRPCPort(p)
	cfg := p.Spec.Config.DeepCopy()
	container := corev1.Container{
		Name:            containerName,
		Image:           image,
		ImagePullPolicy: p.Spec.ImagePullPolicy,
		Command:         cfg.Command,
		Args:            cfg.Args,
		Env:             containerEnv(cfg),
		EnvFrom:         cfg.EnvFrom,
		Ports:           []corev1.ContainerPort{{Name: portName, ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		Resources:       *resources,
		StartupProbe:    startupProbe.grpc(port),
		LivenessProbe:   livenessProbe.grpc(port),
		ReadinessProbe:  readinessProbe.grpc(port),
		SecurityContext: containerSecurity(p.Spec.PodSecurityProfile),
	}
	account := serviceAccountName(p)
	spec := corev1.PodSpec{
		Containers:         []corev1.Container{container},
		RestartPolicy:      corev1.RestartPolicyAlways,
		ServiceAccountName: account,
		ImagePullSecrets:   append([]corev1.LocalObjectReference(nil), p.Spec.ImagePullSecrets...),
		NodeSelector:       pp.nodeSelector,
		Affinity:           pp.affinity,
		Tolerations:        pp.tolerations,
		RuntimeClassName:   pp.runtimeClassName,
		PriorityClassName:  pp.priorityClassName,
		SecurityContext:    podSecurity(p.Spec.PodSecurityProfile),
	}
	if account == "" {
		// A performer serves gRPC and has no business with the Kubernetes
		// API; one that names a service account gets its token.
		spec.AutomountServiceAccountToken = ptr.To(false)
	}
	hash, err := specHash(&spec)
	if err != nil {
		return nil, "", err
	}
	labels := commonLabels(p)
	labels[LabelTemplateHash] = hash
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			// Generated names let a replacement start while the Pod it
			// replaces is still terminating (on a lost node, for ever);
			// create gives a revision's first Pod a fixed name instead.
			GenerateName: fmt.Sprintf("%s-%s-", ServiceName(p.Name), hash),
			Namespace:    p.Namespace,
			Labels:       labels,
			Annotations:  map[string]string{AnnotationVersion: Version(p)},
		},
		Spec: spec,
	}
	return pod, hash, nil
}

// specHash names a revision, as a Deployment's pod-template-hash does:
// short, and safe in names and label values.
func specHash(spec *corev1.PodSpec) (string, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("hashing the Pod spec: %w", err)
	}
	h := fnv.New32a()
	_, _ = h.Write(data)
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10)), nil
}
