package runnerconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Decode reads a configuration file strictly: a field the agent does not
// know is an error, so an operator and an agent of different versions
// disagree loudly rather than drop a setting.
func Decode(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// UserData is the cloud-config that writes cfg to ConfigPath and starts
// the agent at agentPath. It carries one runner's JIT configuration or
// registration token — never a long-lived credential. bootcmd runs before
// write_files, so the configuration's directory is root-only before the
// file exists; the agent deletes the file once it has read it.
func UserData(cfg Config, agentPath string) (string, error) {
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	b.WriteString("bootcmd:\n")
	fmt.Fprintf(&b, "  - [install, -d, -m, \"0700\", %s]\n", path.Dir(ConfigPath))
	b.WriteString("write_files:\n")
	fmt.Fprintf(&b, "  - path: %s\n", ConfigPath)
	b.WriteString("    permissions: \"0600\"\n")
	b.WriteString("    content: |\n")
	for _, line := range strings.Split(string(data), "\n") {
		b.WriteString("      " + line + "\n")
	}
	b.WriteString("runcmd:\n")
	fmt.Fprintf(&b, "  - [%s, --config, %s]\n", agentPath, ConfigPath)
	return b.String(), nil
}

// ParseUserData finds the configuration in user data made by UserData, for
// stand-ins of the machine side (the sandbox, tests).
func ParseUserData(text string) (Config, error) {
	marker := "    content: |\n"
	i := strings.Index(text, marker)
	if i < 0 {
		return Config{}, fmt.Errorf("no bootstrap configuration in the user data")
	}
	var body strings.Builder
	for _, line := range strings.Split(text[i+len(marker):], "\n") {
		rest, ok := strings.CutPrefix(line, "      ")
		if !ok {
			break
		}
		body.WriteString(rest + "\n")
	}
	cfg, err := Decode([]byte(body.String()))
	if err != nil {
		return Config{}, fmt.Errorf("bootstrap configuration: %w", err)
	}
	return cfg, nil
}
