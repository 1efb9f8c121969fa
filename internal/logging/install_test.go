package logging

import (
	"bytes"
	"encoding/json"
	stdlog "log"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// syncBuffer is a bytes.Buffer safe for the loggers' concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// After Install, klog (plain, V(n) up to the verbosity, contextual) and the
// standard log package write JSON entries through the one logger; klog's
// V(n) above the verbosity writes nothing.
func TestInstallRoutesKlogAndStdlog(t *testing.T) {
	var out syncBuffer
	Install(zap.New(zap.WriteTo(&out), zap.Level(zapcore.Level(-3))), 3)
	klog.Info("klog info")
	klog.ErrorS(nil, "klog error", "key", "value")
	klog.V(3).Info("klog v3")
	klog.V(4).Info("klog v4")
	klog.Background().V(2).Info("klog background v2")
	stdlog.Printf("std %s", "log")
	klog.Flush()

	var msgs []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var entry struct{ Level, Msg, Logger string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil || entry.Level == "" {
			t.Errorf("not a JSON entry with a level: %q", line)
			continue
		}
		msgs = append(msgs, entry.Msg)
	}
	want := []string{"klog info", "klog error", "klog v3", "klog background v2", "std log"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Errorf("messages %q, want %q", msgs, want)
	}
}

func TestVerbosity(t *testing.T) {
	for level, want := range map[zapcore.Level]int{zapcore.ErrorLevel: 0, zapcore.InfoLevel: 0, zapcore.DebugLevel: 1, -6: 6} {
		if got := verbosity(level); got != want {
			t.Errorf("verbosity(%v) = %d, want %d", level, got, want)
		}
	}
}
