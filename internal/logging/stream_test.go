package logging_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/hyperfleet/hyperfleet/internal/controlplane"
	"github.com/hyperfleet/hyperfleet/internal/testenv"
	"github.com/hyperfleet/hyperfleet/kustomize/crd"
)

// stderrLog collects a process's stderr line by line.
type stderrLog struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func (l *stderrLog) read(r io.Reader) {
	defer close(l.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		l.mu.Lock()
		l.lines = append(l.lines, sc.Text())
		l.mu.Unlock()
	}
}

func (l *stderrLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// waitFor waits until a line holds every one of parts (in any case),
// whatever its format, and says whether one did.
func (l *stderrLog) waitFor(t *testing.T, timeout time.Duration, parts ...string) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, line := range l.snapshot() {
			if containsAll(line, parts) {
				t.Logf("seen: %s", line)
				return true
			}
		}
		select {
		case <-l.done:
			t.Errorf("the operator exited before logging %q", parts)
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Errorf("no line with %q within %s", parts, timeout)
	return false
}

func containsAll(line string, parts []string) bool {
	line = strings.ToLower(line)
	for _, p := range parts {
		if !strings.Contains(line, strings.ToLower(p)) {
			return false
		}
	}
	return true
}

// The operator writes one stream: every line on its stderr is one JSON
// object with the logger's keys, including what client-go logs through
// klog (leader election, reflectors) and what Go's net/http logs through
// the standard log package, not only what HyperFleet's own code and
// controller-runtime log. The real binary runs as the product runs it,
// `hyperfleet run` with leader election and the HTTPS metrics endpoint,
// against a real API server, at --log-level=6, the level at which client-go
// logs each request it makes (klog's V(6)). Then a client
// speaks plain HTTP to the metrics port (net/http logs the refused
// handshake) and a CRD the manager watches is deleted (its reflector fails
// to list and says so).
func TestOperatorWritesOnlyJSONLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin, err := testenv.BuildOperator(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	assets, err := controlplane.BinaryDir(ctx, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	plane, err := controlplane.Start(controlplane.Options{BinaryDir: assets, CRDs: crds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := plane.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := plane.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(plane.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "hyperfleet-system"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	metricsAddr := freeAddress(t)
	cmd := exec.Command(bin, "run", "--kubeconfig", kubeconfig, "--log-level=6",
		"--leader-elect=true", "--leader-election-namespace", ns, "--operator-namespace", ns,
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", "127.0.0.1:0",
		"--webhook-bind-address", "0", "--credential-endpoint-bind-address", "0")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := &stderrLog{done: make(chan struct{})}
	go log.read(stderr)
	exited := make(chan error, 1)
	go func() {
		<-log.done
		exited <- cmd.Wait()
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Logf("the operator exited with %v", err)
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			if err := <-exited; err != nil {
				t.Logf("the operator, killed: %v", err)
			}
			t.Error("the operator did not stop within a minute of SIGTERM")
		}
	}
	t.Cleanup(stop)

	// client-go's leader election.
	if !log.waitFor(t, 3*time.Minute, "acquired lease", ns+"/hyperfleet-leader") {
		t.FailNow()
	}
	// client-go's requests, logged when klog's own -v is 6 or more (the
	// level is checked through klog.V(6), not the logger): --log-level
	// must reach klog.
	log.waitFor(t, time.Minute, "response", "verb", "status")
	// net/http's "TLS handshake error", through the standard log package,
	// once the metrics server listens (it may start after the lease is
	// taken: serving TLS, it makes its certificate first).
	log.waitFor(t, time.Minute, "serving metrics server")
	speakPlainHTTP(t, metricsAddr)
	log.waitFor(t, 30*time.Second, "client sent an HTTP request to an HTTPS server")
	// A kind the manager watches goes away: client-go's reflector cannot
	// list it and says so.
	if err := c.Delete(ctx, &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "cyberdesks.cyberdesk.io"}}); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, 2*time.Minute, "cyberdesk", "failed to")
	stop()

	lines := log.snapshot()
	if len(lines) == 0 {
		t.Fatal("the operator wrote nothing on stderr")
	}
	var bad []string
	for i, line := range lines {
		var entry map[string]any
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			bad = append(bad, line)
			continue
		}
		for _, key := range []string{"level", "ts", "msg"} {
			if _, ok := entry[key]; !ok {
				t.Errorf("line %d has no %q: %s", i+1, key, line)
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("%d of %d stderr lines are not JSON objects, e.g.:\n  %s", len(bad), len(lines), strings.Join(bad[:min(len(bad), 10)], "\n  "))
	}
	if stdout.Len() > 0 {
		t.Errorf("the operator wrote on stdout: %q", stdout.String())
	}
	t.Logf("%d lines on stderr", len(lines))
	if t.Failed() {
		t.Logf("stderr:\n%s", strings.Join(lines, "\n"))
	}
}

// freeAddress is a loopback address with a port free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// speakPlainHTTP sends a plain HTTP request to a TLS port, as a
// misconfigured scraper would; the server refuses the handshake and logs it.
func speakPlainHTTP(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Errorf("dialing the metrics endpoint: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.0\r\n\r\n"); err != nil {
		t.Errorf("writing to the metrics endpoint: %v", err)
		return
	}
	_, _ = io.ReadAll(conn)
}
