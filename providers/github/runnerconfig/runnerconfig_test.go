package runnerconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

// The user data makes the configuration's directory root-only before it
// writes the file (bootcmd runs before write_files), writes the file 0600,
// and carries the configuration back intact for the stand-ins of the VM.
func TestUserDataProtectsTheConfiguration(t *testing.T) {
	cfg := Config{Name: "pool-abcde", JITConfig: "eyJqaXQiOiJ4In0=", Runner: Runner{User: "runner"}}
	ud, err := UserData(cfg, "/usr/local/bin/hyperfleet-bootstrap")
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

// The agent decodes strictly: a field it does not know is an error, so an
// operator newer than the agent is found at once, not by a setting that
// silently did nothing. Every field the operator can set reads back.
func TestDecodeIsStrictAndComplete(t *testing.T) {
	off := false
	full := Config{URL: "https://github.com/acme/widgets", Token: "t", Name: "p-1", Labels: []string{"gpu"}, RunnerGroup: "g",
		WorkDir: "_w", PowerOff: &off, PowerOffCommand: []string{"halt"},
		Runner: Runner{Version: "2.321.0", OS: "linux", Arch: "x64", DownloadURL: "https://m/{version}", SHA256: "abc",
			InstallDir: "/opt/r", User: "1000:1000", ConfigScript: "c.sh", RunScript: "r.sh", HTTPTimeout: "30s"}}
	data, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if string(again) != string(data) {
		t.Errorf("read back %s, want %s", again, data)
	}
	if _, err := Decode([]byte(`{"name":"p-1","runner":{},"newSetting":true}`)); err == nil || !strings.Contains(err.Error(), "newSetting") {
		t.Errorf("an unknown field: %v, want an error naming it", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		later bool
		want  string
	}{
		{"JIT", Config{Name: "p", JITConfig: "x"}, false, ""},
		{"token with URL", Config{Name: "p", Token: "t", URL: "https://github.com/a"}, false, ""},
		{"credential later", Config{Name: "p"}, true, ""},
		{"no name", Config{JITConfig: "x"}, false, "name is required"},
		{"no credential", Config{Name: "p"}, false, "token (a registration token) or jitConfig is required"},
		{"both", Config{Name: "p", Token: "t", JITConfig: "x"}, false, "mutually exclusive"},
		{"token without URL", Config{Name: "p", Token: "t"}, false, "url is required"},
		{"bad timeout", Config{Name: "p", JITConfig: "x", Runner: Runner{HTTPTimeout: "soon"}}, false, "runner.httpTimeout"},
	} {
		err := tc.cfg.Validate(tc.later)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
