package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testcluster"
	"github.com/hyperfleet/hyperfleet/reconcilers/executor"
)

// Key material the tests look for everywhere it must not be.
const (
	ecdsaKey = "ecdsa-SECRET-0x9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	blsKey   = "bls-SECRET-2b7e151628aed2a6abf7158809cf4f3c"
)

func keysSecret(name string, labelled bool) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		StringData: map[string]string{"ecdsa.key": ecdsaKey, "bls.key": blsKey},
	}
	if labelled {
		s.Labels = map[string]string{meta.CredentialsLabel: "true"}
	}
	return s
}

func testExecutor(name string, mutate ...func(*hourglassv1alpha1.HourglassExecutor)) *hourglassv1alpha1.HourglassExecutor {
	x := &hourglassv1alpha1.HourglassExecutor{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: hourglassv1alpha1.HourglassExecutorSpec{
			Image:              "ghcr.io/layr-labs/hourglass-monorepo/executor:v0.1.0",
			AggregatorEndpoint: "aggregator.example.com:9000",
			OperatorAddress:    "0x1111111111111111111111111111111111111111",
			Chains: []hourglassv1alpha1.ChainConfig{
				{Name: "ethereum", ChainID: 1, RPCURL: "https://eth.example.com", TaskMailboxAddress: "0x2222222222222222222222222222222222222222"},
				{Name: "base", ChainID: 8453, RPCURL: "wss://base.example.com", TaskMailboxAddress: "0x3333333333333333333333333333333333333333"},
			},
			OperatorKeys:      hourglassv1alpha1.OperatorKeys{SecretRef: meta.LocalObjectReference{Name: "operator-keys"}},
			PerformerSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"hourglass.eigenlayer.io/executor": name}},
		},
	}
	for _, m := range mutate {
		m(x)
	}
	return x
}

func testPerformer(name string, labels map[string]string) *hourglassv1alpha1.Performer {
	return &hourglassv1alpha1.Performer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: hourglassv1alpha1.PerformerSpec{
			AVSAddress: "0x4444444444444444444444444444444444444444", Image: "ghcr.io/example/avs-performer", Version: "v1.0.0",
		},
	}
}

// An executor becomes a ConfigMap with its configuration and a Deployment
// running it with the keys mounted, both owned by it, and its status
// follows the Deployment: RollingOut while its Pods start, Available once
// the deployment controller says so, with the Pods on the nodes its
// scheduling asks for.
func TestExecutorRuns(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	e.create(testPerformer("mine", map[string]string{"hourglass.eigenlayer.io/executor": "avs"}))
	e.create(testPerformer("theirs", map[string]string{"hourglass.eigenlayer.io/executor": "other"}))
	x := testExecutor("avs", func(x *hourglassv1alpha1.HourglassExecutor) {
		x.Spec.Replicas = ptrTo(int32(2))
		x.Spec.ServiceAccountName = "executor"
		x.Spec.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
		x.Spec.Scheduling = &hourglassv1alpha1.Scheduling{
			NodeSelector: map[string]string{"node.kubernetes.io/os": "bottlerocket"},
			Tolerations:  []corev1.Toleration{{Key: "bottlerocket", Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}},
		}
		x.Spec.Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "debug"}}
		hold(x)
	})
	e.create(x)

	d := e.waitDeployment("avs", func(*appsv1.Deployment) bool { return true })
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != x.Spec.Image || *d.Spec.Replicas != 2 || pod.ServiceAccountName != "executor" || pod.NodeSelector["node.kubernetes.io/os"] != "bottlerocket" ||
		len(pod.Tolerations) != 1 || c.Env[0].Value != "debug" || c.Resources.Requests.Cpu().String() != "250m" {
		t.Errorf("Deployment = %+v", d.Spec)
	}
	var keysVolume, configVolume bool
	for _, v := range pod.Volumes {
		keysVolume = keysVolume || (v.Secret != nil && v.Secret.SecretName == "operator-keys")
		configVolume = configVolume || (v.ConfigMap != nil && v.ConfigMap.Name == "avs-config")
	}
	if !keysVolume || !configVolume {
		t.Errorf("volumes = %+v, want the keys Secret and the config ConfigMap", pod.Volumes)
	}

	cm := &corev1.ConfigMap{}
	if err := e.get("avs-config", cm); err != nil {
		t.Fatal(err)
	}
	config := cm.Data[executor.ConfigKey]
	for _, want := range []string{
		`aggregator_endpoint: "aggregator.example.com:9000"`, "chain_id: 8453", `rpc: "wss://base.example.com"`,
		`task_mailbox_address: "0x2222222222222222222222222222222222222222"`, `name: "mine"`,
		`endpoint: "performer-mine.` + e.ns + `.svc.cluster.local:8080"`, `path: "/etc/hourglass/keys"`,
	} {
		if !strings.Contains(config, want) {
			t.Errorf("config.yaml lacks %q:\n%s", want, config)
		}
	}
	if strings.Contains(config, "theirs") {
		t.Errorf("config.yaml lists a performer the selector does not pick:\n%s", config)
	}
	for _, obj := range []metav1.Object{d, cm} {
		if ref := metav1.GetControllerOf(obj); ref == nil || ref.Kind != "HourglassExecutor" || ref.Name != "avs" {
			t.Errorf("%s owner = %+v, want the HourglassExecutor (deleting it deletes them)", obj.GetName(), ref)
		}
	}

	rolling := e.waitReason("avs", executor.ReasonRollingOut)
	if rolling.Status.ConfigMapName != "avs-config" || rolling.Status.ConfigHash != d.Spec.Template.Annotations[executor.AnnotationConfigHash] {
		t.Errorf("status = %+v", rolling.Status)
	}
	ready := e.rollOut("avs")
	if ready.Status.AvailableReplicas != 2 || ready.Status.ReadyReplicas != 2 || ready.Status.Replicas != 2 ||
		condition(ready, meta.ReconcilingCondition).Status != "" || condition(ready, meta.StalledCondition).Status != "" {
		t.Errorf("ready status: %s", describe(ready))
	}
	rolled := &appsv1.Deployment{}
	if err := e.get("avs", rolled); err != nil {
		t.Fatal(err)
	}
	if rolled.Status.AvailableReplicas != 2 || rolled.Status.ObservedGeneration != rolled.Generation {
		t.Errorf("Deployment status = %+v, want 2 available for generation %d", rolled.Status, rolled.Generation)
	}
	for _, p := range e.deploymentPods("avs") {
		if p.Spec.NodeName != testcluster.NodeBottlerocket || p.Status.Phase != corev1.PodRunning {
			t.Errorf("executor Pod %s on %q (%s), want Running on %s", p.Name, p.Spec.NodeName, p.Status.Phase, testcluster.NodeBottlerocket)
		}
	}
}

// A changed configuration — a chain's endpoint, a performer joining — rolls
// the Deployment through the hash in its Pod template.
func TestConfigChangeRollsDeployment(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	e.create(testExecutor("roll", hold))
	first := e.waitDeployment("roll", func(*appsv1.Deployment) bool { return true })
	e.rollOut("roll")
	hash1 := first.Spec.Template.Annotations[executor.AnnotationConfigHash]

	e.updateExecutor("roll", func(x *hourglassv1alpha1.HourglassExecutor) { x.Spec.Chains[0].RPCURL = "https://eth-2.example.com" })
	second := e.waitDeployment("roll", func(d *appsv1.Deployment) bool {
		return d.Spec.Template.Annotations[executor.AnnotationConfigHash] != hash1
	})
	if second.Generation <= first.Generation {
		t.Errorf("the Deployment's generation did not move (%d → %d): no roll", first.Generation, second.Generation)
	}
	cm := &corev1.ConfigMap{}
	if err := e.get("roll-config", cm); err != nil || !strings.Contains(cm.Data[executor.ConfigKey], "https://eth-2.example.com") {
		t.Errorf("ConfigMap not updated: %v %q", err, cm.Data)
	}
	rolling := e.waitReason("roll", executor.ReasonRollingOut)
	if rolling.Status.ConfigHash != second.Spec.Template.Annotations[executor.AnnotationConfigHash] {
		t.Errorf("status configHash %s, want the new one", rolling.Status.ConfigHash)
	}
	e.waitEvent(executor.EventConfigChanged, hash1)
	e.rollOut("roll")

	// A performer the selector picks joins the configuration: another roll.
	hash2 := second.Spec.Template.Annotations[executor.AnnotationConfigHash]
	e.create(testPerformer("joiner", map[string]string{"hourglass.eigenlayer.io/executor": "roll"}))
	e.waitDeployment("roll", func(d *appsv1.Deployment) bool {
		return d.Spec.Template.Annotations[executor.AnnotationConfigHash] != hash2
	})
	if err := e.get("roll-config", cm); err != nil || !strings.Contains(cm.Data[executor.ConfigKey], "performer-joiner.") {
		t.Errorf("the new performer is not in the configuration: %v\n%s", err, cm.Data[executor.ConfigKey])
	}
}

// The operator keys are mounted by name and appear nowhere else: not in
// the ConfigMap, the Deployment, the executor's status or any event.
func TestKeysNeverLeak(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	e.create(testExecutor("sealed"))
	e.waitDeployment("sealed", func(*appsv1.Deployment) bool { return true })
	x := e.rollOut("sealed")

	cm := &corev1.ConfigMap{}
	if err := e.get("sealed-config", cm); err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := e.get("sealed", d); err != nil {
		t.Fatal(err)
	}
	var cms corev1.ConfigMapList
	if err := e.c.List(context.Background(), &cms); err != nil {
		t.Fatal(err)
	}
	for what, obj := range map[string]any{"the ConfigMap": cm, "every ConfigMap": cms, "the Deployment": d, "the executor": x, "the events": e.events()} {
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{ecdsaKey, blsKey} {
			if strings.Contains(string(data), key) {
				t.Errorf("%s contains key material", what)
			}
		}
	}
}

// Without its keys Secret the executor says what to create; once the
// ExternalSecret (here, the test) makes it, the executor moves on.
func TestMissingKeysSecret(t *testing.T) {
	e := newEnv(t)
	e.create(testExecutor("keyless", hold))
	x := e.waitReason("keyless", meta.SecretNotFoundReason)
	msg := condition(x, meta.ReadyCondition).Message
	if !strings.Contains(msg, "Secret operator-keys (spec.operatorKeys.secretRef) not found") || !strings.Contains(msg, "ExternalSecret") {
		t.Errorf("message %q should name the Secret and how it is made", msg)
	}
	e.waitEvent(meta.SecretNotFoundReason, "operator-keys")
	// The Deployment is there, its Pods waiting for the Secret to mount
	// (held: kwok mounts nothing, so the test plays the wait).
	e.waitDeployment("keyless", func(*appsv1.Deployment) bool { return true })

	e.create(keysSecret("operator-keys", true))
	e.waitReason("keyless", executor.ReasonRollingOut)
	e.rollOut("keyless")
}

// An object of the executor's names that someone else made is not taken
// over: the executor is Stalled and says what to do.
func TestNameConflict(t *testing.T) {
	e := newEnv(t)
	e.create(keysSecret("operator-keys", true))
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "taken-config"}, Data: map[string]string{"mine": "yes"}})
	e.create(testExecutor("taken"))
	x := e.waitReason("taken", executor.ReasonConflict)
	if condition(x, meta.StalledCondition).Status != metav1.ConditionTrue || !strings.Contains(condition(x, meta.ReadyCondition).Message, "ConfigMap taken-config exists") {
		t.Errorf("conflict: %s", describe(x))
	}
	cm := &corev1.ConfigMap{}
	if err := e.get("taken-config", cm); err != nil || cm.Data["mine"] != "yes" {
		t.Errorf("the foreign ConfigMap was changed: %v %v", err, cm.Data)
	}
}

func ptrTo[T any](v T) *T { return &v }
