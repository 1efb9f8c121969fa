package runnerpool

import (
	"strings"
	"testing"
)

// The user data makes the configuration's directory root-only before it
// writes the file (bootcmd runs before write_files), writes the file 0600,
// and carries the configuration back intact for the stand-ins of the VM.
func TestUserDataProtectsTheConfiguration(t *testing.T) {
	cfg := BootstrapConfig{Name: "pool-abcde", JITConfig: "eyJqaXQiOiJ4In0=", Runner: RunnerSettings{User: "runner"}}
	ud, err := userData(cfg, "/usr/local/bin/hyperfleet-bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	boot, write := strings.Index(ud, "bootcmd:\n  - [install, -d, -m, \"0700\", /etc/hyperfleet]\n"), strings.Index(ud, "write_files:\n")
	if boot < 0 || write < 0 || boot > write {
		t.Fatalf("want bootcmd making /etc/hyperfleet 0700 before write_files:\n%s", ud)
	}
	if !strings.Contains(ud, "permissions: \"0600\"") {
		t.Errorf("the configuration is not written 0600:\n%s", ud)
	}
	back, err := ParseUserData(ud)
	if err != nil {
		t.Fatal(err)
	}
	if back.Name != cfg.Name || back.JITConfig != cfg.JITConfig || back.Runner.User != "runner" {
		t.Errorf("parsed back %+v", back)
	}
}
