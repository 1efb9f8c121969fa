package credentials_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/providers"
	"github.com/hyperfleet/hyperfleet/reconcilers/credentials"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// countingReader counts the GETs that reach the API server.
type countingReader struct {
	client.Reader
	gets atomic.Int32
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

func newReader(maxEntries int) (*credentials.Reader, *countingReader, *clocktesting.FakeClock) {
	api := &countingReader{Reader: testenv.Client()}
	clk := clocktesting.NewFakeClock(time.Now())
	return &credentials.Reader{Reader: api, TTL: 10 * time.Second, MaxEntries: maxEntries, Clock: clk}, api, clk
}

func createSecret(t *testing.T, ns, name string, labelled bool) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"token": "s3cret-" + name}}
	if labelled {
		s.Labels = map[string]string{meta.CredentialsLabel: "true"}
	}
	if err := testenv.Client().Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// A read is reused for the TTL, then read again: a rotation takes effect
// within the TTL without a watch.
func TestReadsAreReusedForTheTTL(t *testing.T) {
	ns := testenv.Namespace(t)
	createSecret(t, ns, "token", true)
	r, api, clk := newReader(0)
	key := types.NamespacedName{Namespace: ns, Name: "token"}
	ctx := context.Background()
	for range 3 {
		s, err := r.Secret(ctx, key, "spec.credentialsRef")
		if err != nil {
			t.Fatal(err)
		}
		if string(s.Data["token"]) != "s3cret-token" {
			t.Fatalf("data %q", s.Data["token"])
		}
	}
	if n := api.gets.Load(); n != 1 {
		t.Errorf("%d GETs for three reads within the TTL, want 1", n)
	}

	rotated := &corev1.Secret{}
	if err := testenv.Client().Get(ctx, key, rotated); err != nil {
		t.Fatal(err)
	}
	rotated.Data["token"] = []byte("rotated")
	if err := testenv.Client().Update(ctx, rotated); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	s, err := r.Secret(ctx, key, "spec.credentialsRef")
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data["token"]) != "rotated" || api.gets.Load() != 2 {
		t.Errorf("after the TTL: data %q after %d GETs, want the rotated token after 2", s.Data["token"], api.gets.Load())
	}
}

// Only Secrets with the credentials label are read; a missing one is
// reported as such. Neither message carries the Secret's data.
func TestTheLabelGatesEveryRead(t *testing.T) {
	ns := testenv.Namespace(t)
	createSecret(t, ns, "unlabelled", false)
	r, _, _ := newReader(0)
	ctx := context.Background()

	_, err := r.Secret(ctx, types.NamespacedName{Namespace: ns, Name: "unlabelled"}, "spec.credentialsRef")
	p, ok := providers.IsPermanent(err)
	if !ok || p.Reason != meta.SecretNotFoundReason || !strings.Contains(p.Message, "lacks the label "+meta.CredentialsLabel) ||
		!strings.Contains(p.Message, "spec.credentialsRef") || strings.Contains(p.Message, "s3cret") {
		t.Errorf("an unlabelled Secret: %v, want a permanent %s naming the label and the field", err, meta.SecretNotFoundReason)
	}
	_, err = r.Secret(ctx, types.NamespacedName{Namespace: ns, Name: "absent"}, "spec.credentialsRef")
	if p, ok := providers.IsPermanent(err); !ok || p.Reason != meta.SecretNotFoundReason || !strings.Contains(p.Message, "not found") {
		t.Errorf("a missing Secret: %v, want a permanent %s", err, meta.SecretNotFoundReason)
	}
	if n := r.Len(); n != 0 {
		t.Errorf("%d reads kept of Secrets that could not be read", n)
	}

	// The operator's own configuration, named by a flag, is not gated; and
	// that read never satisfies a gated one.
	s, err := r.OperatorSecret(ctx, types.NamespacedName{Namespace: ns, Name: "unlabelled"}, "--some-secret")
	if err != nil || string(s.Data["token"]) != "s3cret-unlabelled" {
		t.Fatalf("operator Secret: %v", err)
	}
	if _, err := r.Secret(ctx, types.NamespacedName{Namespace: ns, Name: "unlabelled"}, "spec.credentialsRef"); err == nil {
		t.Error("a gated read was served from an ungated one")
	}
}

// The reader keeps at most MaxEntries reads, dropping the least recently
// used, and drops expired reads as new ones come.
func TestReadsAreBoundedAndEvicted(t *testing.T) {
	ns := testenv.Namespace(t)
	for i := range 4 {
		createSecret(t, ns, fmt.Sprintf("s%d", i), true)
	}
	r, api, clk := newReader(2)
	ctx := context.Background()
	read := func(i int) {
		t.Helper()
		if _, err := r.Secret(ctx, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("s%d", i)}, "spec.credentialsRef"); err != nil {
			t.Fatal(err)
		}
	}
	read(0)
	read(1)
	read(0) // s0 is now the most recently used
	read(2) // evicts s1
	if n := r.Len(); n != 2 {
		t.Errorf("%d reads kept, want at most 2", n)
	}
	gets := api.gets.Load()
	read(0)
	if api.gets.Load() != gets {
		t.Error("the most recently used read was evicted")
	}
	read(1)
	if api.gets.Load() != gets+1 {
		t.Error("the least recently used read was kept beyond MaxEntries")
	}

	// Expired reads go when a new one is stored.
	clk.Step(11 * time.Second)
	read(3)
	if n := r.Len(); n != 1 {
		t.Errorf("%d reads kept after the others expired, want 1", n)
	}
}

// A Secret the operator made for one machine (a runner's bootstrap Secret)
// is given only to that machine's claim, before and after the claim takes
// it over from its pool; a tenant's own labelled Secret to any claim.
func TestClaimSecretIsOnlyForItsClaim(t *testing.T) {
	ns := testenv.Namespace(t)
	ctx := context.Background()
	c := testenv.Client()
	pool := &hypervisorv1alpha1.RunnerPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec: hypervisorv1alpha1.RunnerPoolSpec{
			TemplateRef: meta.LocalObjectReference{Name: "t"}, MaxReplicas: 2,
			GitHub: hypervisorv1alpha1.GitHubRunnerScope{Organization: "acme", CredentialsRef: meta.LocalObjectReference{Name: "gh"}},
		},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	claim := func(name string, controlled bool) *hypervisorv1alpha1.MachineClaim {
		mc := &hypervisorv1alpha1.MachineClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: "t"}},
		}
		if controlled {
			if err := controllerutil.SetControllerReference(pool, mc, c.Scheme()); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
		return mc
	}
	runner, sibling, intruder := claim("runner-a", true), claim("runner-b", true), claim("intruder", false)

	bootstrap := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-a-bootstrap", Namespace: ns,
			Labels: map[string]string{meta.CredentialsLabel: "true", meta.ForClaimLabel: runner.Name}},
		StringData: map[string]string{"credentials": `{"jitConfig":"x"}`},
	}
	if err := controllerutil.SetControllerReference(pool, bootstrap, c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, "own", true)

	r, _, _ := newReader(0)
	check := func(secret string, mc *hypervisorv1alpha1.MachineClaim, allowed bool) {
		t.Helper()
		_, err := r.ClaimSecret(ctx, types.NamespacedName{Namespace: ns, Name: secret}, "spec.credentialsSecretRef", mc)
		p, refused := providers.IsPermanent(err)
		switch {
		case allowed && err != nil:
			t.Errorf("%s refused %s: %v", mc.Name, secret, err)
		case !allowed && (!refused || p.Reason != credentials.SecretNotForThisClaimReason):
			t.Errorf("%s was given %s, made for another machine (err %v)", mc.Name, secret, err)
		case !allowed && !strings.Contains(p.Message, "spec.credentialsSecretRef"):
			t.Errorf("the refusal must name the field: %q", p.Message)
		}
	}
	check("runner-a-bootstrap", runner, true)
	check("runner-a-bootstrap", sibling, false)
	check("runner-a-bootstrap", intruder, false)
	check("own", intruder, true)

	// The pool hands the Secret over to the claim it was made for.
	bootstrap.OwnerReferences = nil
	if err := controllerutil.SetControllerReference(runner, bootstrap, c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	r, _, _ = newReader(0)
	check("runner-a-bootstrap", runner, true)
	check("runner-a-bootstrap", sibling, false)
	check("runner-a-bootstrap", intruder, false)

	// Without the label, the controller alone still tells whose it is.
	delete(bootstrap.Labels, meta.ForClaimLabel)
	if err := c.Update(ctx, bootstrap); err != nil {
		t.Fatal(err)
	}
	r, _, _ = newReader(0)
	check("runner-a-bootstrap", runner, true)
	check("runner-a-bootstrap", intruder, false)
}
