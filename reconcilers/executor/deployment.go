package executor

import (
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
)

// Labels and annotations. app and hourglass.eigenlayer.io/name are the
// original operator's, and its Deployment selector is kept, so a Deployment
// it made is taken over rather than refused as immutable.
const (
	LabelApp  = "app"
	LabelName = "hourglass.eigenlayer.io/name"
	// AnnotationConfigHash in the Pod template names the configuration the
	// Pods run with; a new hash rolls the Deployment.
	AnnotationConfigHash = "hourglass.eigenlayer.io/config-hash"

	labelName     = "app.kubernetes.io/name"
	labelInstance = "app.kubernetes.io/instance"
	appName       = "hourglass-executor"

	containerName    = "executor"
	configVolume     = "config"
	keysVolume       = "operator-keys"
	grpcPortName     = "grpc"
	defaultGRPCPort  = int32(9090)
	defaultKeysMount = "/etc/hourglass/keys"
	defaultReplicas  = int32(1)
	fieldOwner       = "hyperfleet-executor"
)

// DeploymentName and ConfigMapName are the original operator's names.
func DeploymentName(e *hourglassv1alpha1.HourglassExecutor) string { return e.Name }

// ConfigMapName holds the executor configuration.
func ConfigMapName(e *hourglassv1alpha1.HourglassExecutor) string { return e.Name + "-config" }

func selectorLabels(e *hourglassv1alpha1.HourglassExecutor) map[string]string {
	return map[string]string{LabelApp: appName, LabelName: e.Name}
}

func commonLabels(e *hourglassv1alpha1.HourglassExecutor) map[string]string {
	l := selectorLabels(e)
	// The operator's cache selects on ManagedByLabel: a Deployment or
	// ConfigMap without it is read through the APIReader (ensureOwned).
	l[labelName], l[labelInstance], l[meta.ManagedByLabel] = appName, e.Name, meta.ManagedByValue
	return l
}

func grpcPort(e *hourglassv1alpha1.HourglassExecutor) int32 {
	if e.Spec.GRPCPort != 0 {
		return e.Spec.GRPCPort
	}
	return defaultGRPCPort
}

// podSelector is the executor Pods' selector in its string form, for the
// scale subresource.
func podSelector(e *hourglassv1alpha1.HourglassExecutor) string {
	return labels.SelectorFromSet(selectorLabels(e)).String()
}

func keysMountPath(e *hourglassv1alpha1.HourglassExecutor) string {
	if p := e.Spec.OperatorKeys.MountPath; p != "" {
		return path.Clean(p)
	}
	return defaultKeysMount
}

// validate finds what the API schema cannot: a keys mount that would hide,
// or sit inside, the configuration file.
func validate(e *hourglassv1alpha1.HourglassExecutor) error {
	keys := keysMountPath(e)
	if keys == ConfigPath || strings.HasPrefix(ConfigPath, strings.TrimSuffix(keys, "/")+"/") || strings.HasPrefix(keys, ConfigPath+"/") {
		return fmt.Errorf("spec.operatorKeys.mountPath %s overlaps the configuration file %s: choose a directory of its own, such as %s",
			keys, ConfigPath, defaultKeysMount)
	}
	return nil
}

func desiredConfigMap(e *hourglassv1alpha1.HourglassExecutor, config string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName(e), Namespace: e.Namespace, Labels: commonLabels(e)},
		Data:       map[string]string{ConfigKey: config},
	}
}

// desiredDeployment runs the executor with its configuration file and the
// keys Secret mounted read-only. The Secret is referenced by name only: the
// operator never reads it, so the keys cannot leak into the ConfigMap, an
// event or a log.
func desiredDeployment(e *hourglassv1alpha1.HourglassExecutor, hash string) *appsv1.Deployment {
	replicas := defaultReplicas
	if e.Spec.Replicas != nil {
		replicas = *e.Spec.Replicas
	}
	labels := commonLabels(e)
	pod := corev1.PodSpec{
		ServiceAccountName: e.Spec.ServiceAccountName,
		ImagePullSecrets:   append([]corev1.LocalObjectReference(nil), e.Spec.ImagePullSecrets...),
		SecurityContext: &corev1.PodSecurityContext{
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:      containerName,
			Image:     e.Spec.Image,
			Args:      []string{"--config=" + ConfigPath},
			Env:       append([]corev1.EnvVar(nil), e.Spec.Env...),
			Resources: *e.Spec.Resources.DeepCopy(),
			VolumeMounts: []corev1.VolumeMount{
				// One file by subPath, so the keys directory may live beside
				// it under /etc/hourglass. A subPath file is fixed at start,
				// which is what a roll on each configuration change wants.
				{Name: configVolume, MountPath: ConfigPath, SubPath: ConfigKey, ReadOnly: true},
				{Name: keysVolume, MountPath: keysMountPath(e), ReadOnly: true},
			},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false)},
			Ports:           []corev1.ContainerPort{{Name: grpcPortName, ContainerPort: grpcPort(e), Protocol: corev1.ProtocolTCP}},
			// A TCP connection to the gRPC port: ponos serves no HTTP
			// health endpoint, and a gRPC health service is not promised.
			// Ready once it listens; restarted only after a minute of not
			// listening, so a slow chain connection at start is not killed.
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(grpcPortName)}},
				PeriodSeconds: 5, FailureThreshold: 3,
			},
			LivenessProbe: &corev1.Probe{
				ProbeHandler:        corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(grpcPortName)}},
				InitialDelaySeconds: 15, PeriodSeconds: 10, FailureThreshold: 6,
			},
		}},
		Volumes: []corev1.Volume{
			{Name: configVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(e)},
			}}},
			// Not optional: an executor without its keys must not start.
			{Name: keysVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: e.Spec.OperatorKeys.SecretRef.Name, Optional: ptr.To(false),
			}}},
		},
	}
	if s := e.Spec.Scheduling; s != nil {
		pod.NodeSelector = s.NodeSelector
		pod.Affinity = s.Affinity.DeepCopy()
		pod.Tolerations = s.Tolerations
		pod.RuntimeClassName = s.RuntimeClassFor()
		pod.PriorityClassName = s.PriorityClassName
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: DeploymentName(e), Namespace: e.Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: selectorLabels(e)},
			// Recreate: the old Pods are gone before a new one starts, so
			// two executors never sign with the same operator keys at once.
			// A RollingUpdate, even with maxSurge 0, starts the new Pod while
			// the old one is still in its termination grace period. The
			// price is a short gap in service during a rollout.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{AnnotationConfigHash: hash}},
				Spec:       pod,
			},
		},
	}
}
