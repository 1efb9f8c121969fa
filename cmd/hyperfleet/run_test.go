package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

const testKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// --kubeconfig F and KUBECONFIG=F give the same client: the flag once
// built it with client-go's bare default of 5 requests a second.
func TestKubeconfigFlagAndVariableGiveTheSameClient(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	byFlag, err := restConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	byVariable, err := restConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if byFlag.QPS != byVariable.QPS || byFlag.Burst != byVariable.Burst || byFlag.Host != byVariable.Host {
		t.Errorf("--kubeconfig: host %s QPS %v burst %d; KUBECONFIG: host %s QPS %v burst %d",
			byFlag.Host, byFlag.QPS, byFlag.Burst, byVariable.Host, byVariable.QPS, byVariable.Burst)
	}
	if byFlag.QPS > 0 && byFlag.QPS <= 5 {
		t.Errorf("--kubeconfig client limited to %v requests a second", byFlag.QPS)
	}
}

// --gc-percent applies unless GOGC is set, which always wins.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if _, set := os.LookupEnv("GOGC"); set {
		t.Fatal("run the tests without GOGC in the environment")
	}
	if got := setGCPercent(40); got != 40 || debug.SetGCPercent(40) != 40 {
		t.Errorf("setGCPercent(40) = %d, want 40 in effect", got)
	}
	t.Setenv("GOGC", "80")
	debug.SetGCPercent(80) // as the runtime does from GOGC at start
	if got := setGCPercent(40); got != 80 || debug.SetGCPercent(80) != 80 {
		t.Errorf("with GOGC=80, setGCPercent(40) = %d, want GOGC's 80 kept", got)
	}
}
