// Package logging configures the structured logger the manager and every
// reconciler use (through ctrl.LoggerFrom(ctx)).
package logging

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
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
	fs.StringVar(&o.Level, "log-level", "info", "Log verbosity: debug, info, error, or a number (1 = debug, 2+ = trace).")
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
