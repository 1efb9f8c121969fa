// Package logging configures the structured logger the manager and every
// reconciler use (through ctrl.LoggerFrom(ctx)), and makes it the logger of
// the libraries too, so the process writes one stream.
package logging

import (
	"bytes"
	"flag"
	"fmt"
	stdlog "log"
	"strconv"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Options select the level and encoding.
type Options struct {
	// Level: debug, info, error, or a number (higher is more verbose; 1 = debug).
	Level string
	// Format: json (production) or console (people).
	Format string
}

// BindFlags registers --log-level and --log-format.
func (o *Options) BindFlags(fs *flag.FlagSet, defaultFormat string) {
	fs.StringVar(&o.Level, "log-level", "info", "Log verbosity: debug, info, error, or a number (1 = debug, 2+ = trace; also klog's -v, for client-go).")
	fs.StringVar(&o.Format, "log-format", defaultFormat, "Log encoding: json or console.")
}

// New builds the logger, or explains which flag is wrong.
func New(o Options) (logr.Logger, error) {
	level, err := parseLevel(o.Level)
	if err != nil {
		return logr.Discard(), err
	}
	var dev bool
	switch o.Format {
	case "json", "":
	case "console":
		dev = true
	default:
		return logr.Discard(), fmt.Errorf("--log-format=%q: want json or console", o.Format)
	}
	return zap.New(zap.Level(level), zap.UseDevMode(dev), zap.StacktraceLevel(zapcore.PanicLevel)), nil
}

// Setup builds the logger o asks for and installs it (Install).
func Setup(o Options) (logr.Logger, error) {
	log, err := New(o)
	if err != nil {
		return logr.Discard(), err
	}
	level, _ := parseLevel(o.Level) // New parsed it
	Install(log, verbosity(level))
	return log, nil
}

// Install makes log the logger of everything in the process that logs, so
// stderr carries one stream in one encoding:
//   - controller-runtime (ctrl.SetLogger);
//   - klog, through which client-go and the other Kubernetes libraries log
//     (reflectors, work queues, leader election, event recording): klog
//     hands each line to log instead of writing its own text format, and,
//     as a contextual logger, klog.Background() and klog.FromContext return
//     log itself. klog's -v is set to v, so its V(n) lines are written when
//     the logger's level asks for them (--log-level=6 shows client-go's requests);
//   - Go's standard log package, which net/http uses for its servers'
//     errors (a TLS handshake refused on the metrics port), under the name
//     "stdlog".
func Install(log logr.Logger, v int) {
	ctrllog.SetLogger(log)
	klog.SetLoggerWithOptions(log, klog.ContextualLogger(true))
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(v)) // a non-negative number always parses
	stdlog.SetFlags(0)
	stdlog.SetPrefix("")
	stdlog.SetOutput(stdlogWriter{log.WithName("stdlog")})
}

// verbosity is the logr V level a zap level enables down to: 0 for info
// and above, n for level -n.
func verbosity(l zapcore.Level) int {
	if l >= 0 {
		return 0
	}
	return -int(l)
}

// stdlogWriter turns each line the standard log package writes into an
// info entry.
type stdlogWriter struct{ log logr.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		if msg := bytes.TrimSpace(line); len(msg) > 0 {
			w.log.Info(string(msg))
		}
	}
	return len(p), nil
}

func parseLevel(s string) (zapcore.Level, error) {
	switch s {
	case "debug":
		return zapcore.DebugLevel, nil
	case "info", "":
		return zapcore.InfoLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 10 {
		return 0, fmt.Errorf("--log-level=%q: want debug, info, error, or a number from 0 to 10", s)
	}
	// logr verbosity V(n) maps to zap level -n.
	return zapcore.Level(-n), nil
}
