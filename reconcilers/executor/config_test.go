package executor

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	hourglassv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hourglass/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
)

func testExecutor() *hourglassv1alpha1.HourglassExecutor {
	return &hourglassv1alpha1.HourglassExecutor{
		ObjectMeta: metav1.ObjectMeta{Name: "avs-executor", Namespace: "avs"},
		Spec: hourglassv1alpha1.HourglassExecutorSpec{
			Image:              "ghcr.io/layr-labs/hourglass-monorepo/executor:v0.1.0",
			AggregatorEndpoint: "aggregator.example.com:9000",
			OperatorAddress:    "0x1111111111111111111111111111111111111111",
			Chains: []hourglassv1alpha1.ChainConfig{{Name: "ethereum", ChainID: 1, RPCURL: "https://eth.example.com",
				TaskMailboxAddress: "0x2222222222222222222222222222222222222222"}},
			OperatorKeys: hourglassv1alpha1.OperatorKeys{SecretRef: meta.LocalObjectReference{Name: "keys"}},
		},
	}
}

func testPerformer(name string, port int32) hourglassv1alpha1.Performer {
	return hourglassv1alpha1.Performer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "avs"},
		Spec: hourglassv1alpha1.PerformerSpec{AVSAddress: "0x4444444444444444444444444444444444444444", Image: "img", Version: "v1",
			Config: hourglassv1alpha1.PerformerConfig{GRPCPort: port}},
	}
}

// The configuration uses the original operator's keys, lists the
// performers by stable endpoint (sorted, so the hash is stable), and says
// where the keys are mounted, never what they are.
func TestRenderConfig(t *testing.T) {
	e := testExecutor()
	a, err := renderConfig(e, []hourglassv1alpha1.Performer{testPerformer("zeta", 0), testPerformer("alpha", 9000)}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	var cfg executorConfig
	if err := yaml.UnmarshalStrict([]byte(a), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.AggregatorEndpoint != "aggregator.example.com:9000" || cfg.PerformerMode != "kubernetes" || cfg.Kubernetes.Namespace != "avs" {
		t.Errorf("config = %+v", cfg)
	}
	if c := cfg.Chains[0]; c.Name != "ethereum" || c.ChainID != 1 || c.RPC != "https://eth.example.com" || c.TaskMailboxAddress != "0x2222222222222222222222222222222222222222" {
		t.Errorf("chain = %+v", c)
	}
	if len(cfg.Performers) != 2 || cfg.Performers[0].Name != "alpha" ||
		cfg.Performers[0].Endpoint != "performer-alpha.avs.svc.cluster.local:9000" || cfg.Performers[1].Endpoint != "performer-zeta.avs.svc.cluster.local:8080" {
		t.Errorf("performers = %+v", cfg.Performers)
	}
	if cfg.OperatorKeys.Path != "/etc/hourglass/keys" {
		t.Errorf("keys path = %q", cfg.OperatorKeys.Path)
	}
	b, _ := renderConfig(e, []hourglassv1alpha1.Performer{testPerformer("alpha", 9000), testPerformer("zeta", 0)}, "cluster.local")
	if configHash(a) != configHash(b) {
		t.Error("the performers' order changed the hash")
	}
	upgraded := testPerformer("alpha", 9000)
	upgraded.Spec.Version = "v2"
	c, _ := renderConfig(e, []hourglassv1alpha1.Performer{upgraded, testPerformer("zeta", 0)}, "cluster.local")
	if configHash(a) != configHash(c) {
		t.Error("a performer's upgrade must not restart the executor")
	}
	e.Spec.Chains[0].RPCURL = "https://eth2.example.com"
	d, _ := renderConfig(e, nil, "cluster.local")
	if configHash(a) == configHash(d) {
		t.Error("a changed chain must change the hash")
	}
}

func TestDeploymentShape(t *testing.T) {
	e := testExecutor()
	e.Spec.ServiceAccountName = "executor"
	e.Spec.Scheduling = &hourglassv1alpha1.Scheduling{NodeSelector: map[string]string{"pool": "avs"}}
	d := desiredDeployment(e, "abc")
	pod := d.Spec.Template.Spec
	if d.Spec.Template.Annotations[AnnotationConfigHash] != "abc" || *d.Spec.Replicas != 1 || pod.ServiceAccountName != "executor" || pod.NodeSelector["pool"] != "avs" {
		t.Errorf("deployment = %+v", d.Spec)
	}
	c := pod.Containers[0]
	if c.Args[0] != "--config=/etc/hourglass/config.yaml" {
		t.Errorf("args = %v", c.Args)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts[configVolume]; m.MountPath != ConfigPath || m.SubPath != ConfigKey || !m.ReadOnly {
		t.Errorf("config mount = %+v", m)
	}
	if m := mounts[keysVolume]; m.MountPath != "/etc/hourglass/keys" || !m.ReadOnly {
		t.Errorf("keys mount = %+v", m)
	}
	for _, v := range pod.Volumes {
		if v.Secret != nil && (v.Secret.SecretName != "keys" || v.Secret.Optional == nil || *v.Secret.Optional) {
			t.Errorf("keys volume = %+v", v.Secret)
		}
	}
	for _, env := range c.Env {
		if env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil {
			t.Errorf("the keys must be mounted, not put in the environment: %+v", env)
		}
	}
}

func TestKeysMountMustNotOverlapTheConfig(t *testing.T) {
	for path, ok := range map[string]bool{"/etc/hourglass/keys": true, "/keys": true, "/etc/hourglass": false, "/etc": false,
		"/etc/hourglass/config.yaml": false, "/etc/hourglass/config.yaml/x": false, "/etc/hourglass/": false} {
		e := testExecutor()
		e.Spec.OperatorKeys.MountPath = path
		if err := validate(e); (err == nil) != ok {
			t.Errorf("mountPath %s: err = %v, want ok=%v", path, err, ok)
		}
	}
}
