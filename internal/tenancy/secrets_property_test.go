package tenancy_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leanovate/gopter"
	"github.com/leanovate/gopter/gen"
	"github.com/leanovate/gopter/prop"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hypervisorv1alpha1 "github.com/hyperfleet/hyperfleet/apis/hypervisor/v1alpha1"
	"github.com/hyperfleet/hyperfleet/apis/meta"
	"github.com/hyperfleet/hyperfleet/internal/eventually"
	"github.com/hyperfleet/hyperfleet/internal/proptest"
	"github.com/hyperfleet/hyperfleet/internal/testenv/hypervisorlab"
)

// secretCases is how many generated cases (each a few failure paths at
// once) the property needs in `make test`: every case drives the real API
// server and the operator for seconds. PROPERTY_CASES searches harder.
const secretCases = 3

// pathsPerCase failure paths run side by side in one case, so an endpoint
// that hangs until the client's bound costs its case that bound once.
const pathsPerCase = 3

// objectKind is the kind whose failure path a case drives.
type objectKind int

const (
	kindCluster objectKind = iota // a Proxmox HypervisorCluster
	kindClaim                     // a MachineClaim on a template on a Proxmox cluster
	kindPool                      // a RunnerPool on a GitHub API
)

func (k objectKind) String() string {
	return [...]string{"HypervisorCluster", "MachineClaim", "RunnerPool"}[k]
}

// endpointMode is how the endpoint the object names fails.
type endpointMode int

const (
	modeAnswer  endpointMode = iota // answers with an error status
	modeHang                        // never answers, past the client's bound
	modeTLS                         // https with a certificate nobody trusts
	modeRefused                     // nothing listens
)

func (m endpointMode) String() string {
	return [...]string{"answers", "hangs", "untrusted TLS", "refuses connections"}[m]
}

// noise is text around a marker's unique core, drawn to look like what
// the operator might mangle, quote or cut: base64, JSON's and HTML's
// special characters, newlines and other whitespace (which a GitHub token
// may not hold), non-ASCII, or thousands of bytes.
type noise struct {
	Kind int
	Text string
	Long int
}

func (n noise) String() string {
	if n.Long > 0 {
		return fmt.Sprintf("%d bytes", len(n.render()))
	}
	return fmt.Sprintf("%q", n.Text)
}

func (n noise) render() string {
	if n.Long == 0 {
		return n.Text
	}
	// Long values from the case's own number: deterministic, and not a
	// repetition a search would find by chance.
	r := rand.New(rand.NewPCG(uint64(n.Long), 7))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="
	b := make([]byte, n.Long)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

func genNoise() gopter.Gen {
	text := func(alphabet string, maxLen int) gopter.Gen {
		chars := make([]any, 0, len(alphabet))
		for _, r := range alphabet {
			chars = append(chars, r)
		}
		return gen.IntRange(0, maxLen).FlatMap(func(n any) gopter.Gen {
			return gen.SliceOfN(n.(int), gen.OneConstOf(chars...)).Map(func(rs []rune) string { return string(rs) })
		}, reflect.TypeOf(""))
	}
	return gen.OneGenOf(
		gen.Const(noise{}),
		text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", 40).Map(func(s string) noise { return noise{Kind: 1, Text: s} }),
		text(`"\<>&'{}[]:,%$`, 20).Map(func(s string) noise { return noise{Kind: 2, Text: s} }),
		text("abc\n\r\t =;", 12).Map(func(s string) noise { return noise{Kind: 3, Text: s + "\n"} }),
		text("éü✓…€ß", 6).Map(func(s string) noise { return noise{Kind: 4, Text: s} }),
		gen.IntRange(1000, 6000).Map(func(n int) noise { return noise{Kind: 5, Long: n} }),
	)
}

// failurePath is one object of a tenant's, its credentials Secret holding
// a marker, and how the endpoint it names fails.
type failurePath struct {
	Kind objectKind
	// Password: Proxmox username and password instead of a token; for a
	// pool, a GitHub App whose private key is the marker.
	Password bool
	// UserData (claims): 0 none, 1 cloud-config holding a marker, 2 a key
	// the Secret lacks, 3 data without a cloud-init header.
	UserData       int
	Before, After  noise
	Mode           endpointMode
	Status         int
	Echo           echoPart
	Shape          bodyShape
	InHeader       bool
	AuthorizedLike bool // the GitHub token starts "ghp_"
}

func (p failurePath) String() string {
	how := p.Mode.String()
	if p.Mode == modeAnswer {
		how = p.hostile().String()
	}
	return fmt.Sprintf("{%s password/app %t userData %d marker %s+core+%s; endpoint %s}", p.Kind, p.Password, p.UserData, p.Before, p.After, how)
}

func (p failurePath) hostile() hostile {
	return hostile{TLS: p.Kind != kindPool || p.Mode == modeTLS, Status: p.Status, Echo: p.Echo, Shape: p.Shape,
		InHeader: p.InHeader, Hang: p.Mode == modeHang}
}

func genFailurePath() gopter.Gen {
	return gen.Struct(reflect.TypeOf(failurePath{}), map[string]gopter.Gen{
		// A RunnerPool has the most ways to fail (token or App, then
		// which answers GitHub's client quotes): drawn as often as the
		// two Proxmox kinds together.
		"Kind":     gen.Weighted([]gen.WeightedGen{{Weight: 1, Gen: gen.Const(kindCluster)}, {Weight: 1, Gen: gen.Const(kindClaim)}, {Weight: 2, Gen: gen.Const(kindPool)}}),
		"Password": gen.Weighted([]gen.WeightedGen{{Weight: 1, Gen: gen.Const(true)}, {Weight: 2, Gen: gen.Const(false)}}),
		"UserData": gen.IntRange(0, 3),
		"Before":   genNoise(),
		"After":    genNoise(),
		"Mode": gen.Weighted([]gen.WeightedGen{
			{Weight: 6, Gen: gen.Const(modeAnswer)}, {Weight: 1, Gen: gen.Const(modeHang)},
			{Weight: 1, Gen: gen.Const(modeTLS)}, {Weight: 1, Gen: gen.Const(modeRefused)},
		}),
		"Status":         gen.OneConstOf(400, 401, 403, 404, 422, 429, 500, 502, 503),
		"Echo":           gen.OneConstOf(echoWhole, echoAfterScheme, echoSecret, echoNothing),
		"Shape":          gen.OneConstOf(shapeGitHub, shapeKubernetes, shapeProxmox, shapePlain),
		"InHeader":       gen.Bool(),
		"AuthorizedLike": gen.Bool(),
	})
}

// Property 15 (no persistent secrets): whatever a tenant's credentials
// hold and however the endpoint it names fails — any error status, the
// credential echoed whole or in parts, as JSON or text or in a header; an
// endpoint that hangs past the bound, one whose TLS is not trusted, one
// that refuses connections — the object reports the failure, and no byte
// sequence of the Secret's value (whole, a 16-byte window of it, escaped
// or in base64) is in any object, Event, log line or metric.
func TestPropertySecretBytesNeverLeaveTheirSecret(t *testing.T) {
	ctx := quiet()
	l := hypervisorlab.Proxmox(t).AsTenant()
	nonce := make([]byte, 4)
	_, _ = crand.Read(nonce)
	var cases atomic.Int32
	logStart := logs.Len()
	all := map[string]string{}
	proptest.CheckCostly(t, secretCases, func(p *gopter.Properties) {
		p.Property("every failure is reported and no Secret byte leaves its Secret", prop.ForAll(
			func(paths []failurePath) string {
				n := cases.Add(1)
				run := &secretCase{ctx: ctx, t: t, l: l, prefix: fmt.Sprintf("p%d", n), logFrom: logs.Len(),
					core: fmt.Sprintf("MRK%s%02d", hex.EncodeToString(nonce), n), markers: map[string]string{}}
				defer run.cleanup()
				msg := run.check(paths)
				for what, m := range run.markers {
					all[fmt.Sprintf("case %d: %s", n, what)] = m
				}
				return msg
			},
			gen.SliceOfN(pathsPerCase, genFailurePath()),
		))
	})
	// Every case searched the log of its own time; the log of the whole
	// run, with what each case's objects logged after it, is searched for
	// every marker whole.
	text := logs.Since(logStart)
	for what, m := range all {
		for _, n := range needles(m, true) {
			if i := bytes.Index(text, n); i >= 0 {
				t.Errorf("Secret bytes left their Secret: the operator's log (%s, as %q in …%s…)", what, n, excerpt(text, i, len(n)))
				break
			}
		}
	}
}

// secretCase is one generated case: its objects, servers and markers.
type secretCase struct {
	ctx      context.Context
	t        *testing.T
	l        *hypervisorlab.Lab
	prefix   string
	core     string
	markers  map[string]string
	created  []client.Object
	closers  []func()
	failures []client.Object
	logFrom  int
}

func (c *secretCase) cleanup() {
	for _, f := range c.closers {
		f()
	}
	for _, o := range c.created {
		_ = c.l.C.Delete(c.ctx, o)
	}
}

func (c *secretCase) create(obj client.Object) error {
	obj.SetNamespace(c.l.NS)
	if err := c.l.C.Create(c.ctx, obj); err != nil {
		return fmt.Errorf("the tenant cannot create %T %s: %w", obj, obj.GetName(), err)
	}
	c.created = append(c.created, obj)
	return nil
}

// marker is a value of a Secret: noise around a core unique to the case
// and the path.
func (c *secretCase) marker(what string, p failurePath) string {
	m := p.Before.render() + fmt.Sprintf("%s%02d", c.core, len(c.markers)) + p.After.render()
	c.markers[what] = m
	return m
}

func (c *secretCase) secret(name string, data map[string]string) error {
	return c.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{meta.CredentialsLabel: "true"}}, StringData: data})
}

// endpoint is the URL of the endpoint p fails with.
func (c *secretCase) endpoint(p failurePath) string {
	scheme := "https"
	if p.Kind == kindPool && p.Mode != modeTLS {
		scheme = "http"
	}
	if p.Mode == modeRefused {
		return scheme + "://" + refusedAddress(c.t)
	}
	s, closeFn := hostileServer(c.t, p.hostile())
	c.closers = append(c.closers, closeFn)
	return s.URL
}

func (c *secretCase) check(paths []failurePath) string {
	for i, p := range paths {
		if err := c.drive(fmt.Sprintf("%s-%d", c.prefix, i), p); err != nil {
			return err.Error()
		}
	}
	for _, obj := range c.failures {
		if msg := c.waitFailure(obj); msg != "" {
			return msg
		}
	}
	time.Sleep(time.Second) // a few more reconciles, and their log lines
	if where := leaks(c.ctx, c.t, c.markers, c.logFrom); len(where) > 0 {
		return "Secret bytes left their Secret: " + strings.Join(where, "; ")
	}
	return ""
}

// drive makes p's Secrets and objects, and notes the object that must
// report the failure.
func (c *secretCase) drive(name string, p failurePath) error {
	switch p.Kind {
	case kindCluster, kindClaim:
		creds := map[string]string{"tokenID": "root@pam!hf", "tokenSecret": c.marker(name+" Proxmox token secret", p)}
		if p.Password {
			creds = map[string]string{"username": "root@pam", "password": c.marker(name+" Proxmox password", p)}
		}
		if err := c.secret(name, creds); err != nil {
			return err
		}
		pve := &hypervisorv1alpha1.HypervisorCluster{}
		if err := c.l.C.Get(c.ctx, client.ObjectKey{Namespace: c.l.NS, Name: "pve"}, pve); err != nil {
			return err
		}
		cluster := &hypervisorv1alpha1.HypervisorCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.HypervisorClusterSpec{
				Provider: hypervisorv1alpha1.ProviderProxmox, Endpoint: c.endpoint(p) + "/api2/json",
				CredentialsRef:      &meta.LocalObjectReference{Name: name},
				HealthCheckInterval: &metav1.Duration{Duration: time.Second},
				Proxmox:             pve.Spec.Proxmox.DeepCopy(),
			}}
		if p.Mode != modeTLS {
			cluster.Spec.TLS = &hypervisorv1alpha1.TLSConfig{InsecureSkipVerify: true}
		}
		if err := c.create(cluster); err != nil {
			return err
		}
		if p.Kind == kindCluster {
			c.failures = append(c.failures, cluster)
			return nil
		}
		base := &hypervisorv1alpha1.HypervisorMachineTemplate{}
		if err := c.l.C.Get(c.ctx, client.ObjectKey{Namespace: c.l.NS, Name: "ubuntu"}, base); err != nil {
			return err
		}
		tmpl := &hypervisorv1alpha1.HypervisorMachineTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: *base.Spec.DeepCopy()}
		tmpl.Spec.ClusterRef = meta.LocalObjectReference{Name: name}
		if err := c.create(tmpl); err != nil {
			return err
		}
		claim := &hypervisorv1alpha1.MachineClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.MachineClaimSpec{TemplateRef: hypervisorv1alpha1.TemplateReference{Name: name}}}
		if p.UserData > 0 {
			data := map[int]map[string]string{
				1: {"user-data": "#cloud-config\nwrite_files:\n- content: " + c.marker(name+" user data", p) + "\n  path: /etc/x\n"},
				2: {"other": c.marker(name+" user data under another key", p)},
				3: {"user-data": c.marker(name+" user data without a header", p)},
			}[p.UserData]
			if err := c.secret(name+"-userdata", data); err != nil {
				return err
			}
			claim.Spec.UserDataSecretRef = &meta.SecretKeyReference{Name: name + "-userdata", Key: "user-data"}
		}
		if err := c.create(claim); err != nil {
			return err
		}
		c.failures = append(c.failures, claim)
	case kindPool:
		token := c.marker(name+" GitHub token", p)
		if p.AuthorizedLike {
			token = "ghp_" + token
		}
		creds := map[string]string{"token": token}
		if p.Password {
			creds = map[string]string{"appID": "1", "installationID": "2",
				"privateKey": "-----BEGIN RSA PRIVATE KEY-----\n" + c.marker(name+" GitHub App key", p) + "\n-----END RSA PRIVATE KEY-----\n"}
		}
		if err := c.secret(name, creds); err != nil {
			return err
		}
		pool := &hypervisorv1alpha1.RunnerPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: hypervisorv1alpha1.RunnerPoolSpec{
				TemplateRef: meta.LocalObjectReference{Name: "ubuntu"}, MaxReplicas: 1, Labels: []string{name},
				GitHub: hypervisorv1alpha1.GitHubRunnerScope{Owner: "acme", Repository: "widgets",
					CredentialsRef: meta.LocalObjectReference{Name: name}, APIURL: c.endpoint(p) + "/"},
			}}
		if err := c.create(pool); err != nil {
			return err
		}
		c.failures = append(c.failures, pool)
	}
	return nil
}

// waitFailure waits for obj to report a failure: Ready False with a reason
// that is not "still progressing". It returns why not, if it never does.
func (c *secretCase) waitFailure(obj client.Object) string {
	accessor, ok := obj.(meta.ConditionsAccessor)
	if !ok {
		return fmt.Sprintf("%T has no conditions", obj)
	}
	var why string
	failed := eventually.Holds(60*time.Second, func() bool {
		if err := c.l.C.Get(c.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			why = err.Error()
			return false
		}
		ready := hypervisorlab.ReadyCondition(accessor.GetConditions())
		why = fmt.Sprintf("%T %s: Ready %s %s: %s", obj, obj.GetName(), ready.Status, ready.Reason, ready.Message)
		return ready.Status == metav1.ConditionFalse && ready.Reason != "" && ready.Reason != meta.ProgressingReason
	})
	if !failed {
		return "no failure reported: " + why
	}
	return ""
}
