package logging

import (
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
)

func TestParseLevel(t *testing.T) {
	cases := []struct {
		in      string
		want    zapcore.Level
		wantErr string
	}{
		{"", zapcore.InfoLevel, ""},
		{"info", zapcore.InfoLevel, ""},
		{"debug", zapcore.DebugLevel, ""},
		{"error", zapcore.ErrorLevel, ""},
		{"0", zapcore.InfoLevel, ""},
		{"3", zapcore.Level(-3), ""},
		{"verbose", 0, `--log-level="verbose": want debug, info, error, or a number from 0 to 10`},
		{"-1", 0, "--log-level"},
		{"11", 0, "--log-level"},
	}
	for _, tc := range cases {
		got, err := parseLevel(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseLevel(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseLevel(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestNewRejectsUnknownFormat(t *testing.T) {
	if _, err := New(Options{Level: "info", Format: "xml"}); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("New with format xml: %v; want an error naming --log-format", err)
	}
	for _, f := range []string{"json", "console"} {
		if _, err := New(Options{Level: "debug", Format: f}); err != nil {
			t.Errorf("format %s: %v", f, err)
		}
	}
}
