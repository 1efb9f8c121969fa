package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hyperfleet/hyperfleet/providers/spire"
)

// takeConfig reads the configuration file and deletes it at once: it holds
// the runner's credential (a JIT config or a registration token), and a job
// must never find it on the disk. The default directory, /etc/hyperfleet,
// is made root-only first (the user data's bootcmd already made it so
// before cloud-init wrote the file); a directory given with --config is the
// caller's, and left as it is.
func takeConfig(path string) ([]byte, error) {
	if err := rootOnlyDir(path); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path) //nolint:gosec // the path is the operator's to choose
	if err != nil {
		return nil, fmt.Errorf("reading the configuration %s (written by cloud-init): %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return nil, fmt.Errorf("deleting the configuration %s after reading it (it holds the runner's credential): %w", path, err)
	}
	return data, nil
}

// rootOnlyDir makes /etc/hyperfleet root-only when path is one of the
// default files in it (bootstrap.json, attestation.json). A directory given
// by flag is the caller's, and left as it is.
func rootOnlyDir(path string) error {
	if p := filepath.Clean(path); p != DefaultConfigPath && p != spire.MachineConfigPath {
		return nil
	}
	// A directory: root-only, and searchable by root.
	err := os.Chmod(filepath.Dir(path), 0o700) //nolint:gosec // see above
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("making %s root-only: %w", filepath.Dir(path), err)
	}
	return nil
}

// jitFiles decodes a JIT config into the files it stands for. GitHub's
// encoded_jit_config is base64 of a JSON object mapping each of the
// runner's settings files (.runner, .credentials, .credentials_rsaparams)
// to its base64 content; Runner.Listener's run --jitconfig writes exactly
// these files into its root directory and goes on as a configured runner.
// The agent writes them itself, so the config never reaches the listener's
// command line or environment (/proc/<pid>/cmdline and environ, which a job
// running as the same user can read).
func jitFiles(encoded string) (map[string][]byte, error) {
	outer, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return nil, fmt.Errorf("the JIT config is not base64: %w", err)
	}
	var entries map[string]string
	if err := json.Unmarshal(outer, &entries); err != nil {
		return nil, fmt.Errorf("the JIT config is not a JSON object of files: %w", err)
	}
	if len(entries) == 0 {
		return nil, errors.New("the JIT config holds no file")
	}
	files := make(map[string][]byte, len(entries))
	for name, content := range entries {
		if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
			return nil, fmt.Errorf("the JIT config names a file %q outside the runner's directory", name)
		}
		data, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return nil, fmt.Errorf("the JIT config's file %s is not base64: %w", name, err)
		}
		files[name] = data
	}
	return files, nil
}

// writeRunnerFiles writes the runner's settings files into its directory,
// readable by the runner's user only.
func writeRunnerFiles(dir string, files map[string][]byte, u runnerUser) error {
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return err
		}
		if err := u.own(path); err != nil {
			return err
		}
	}
	return nil
}
