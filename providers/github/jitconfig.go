package github

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// JITConfigInfo is what an encoded JIT config says about its runner, without
// its credentials: enough to check a config before handing it to a machine,
// or to name the runner in a log line.
type JITConfigInfo struct {
	RunnerID   int64
	RunnerName string
	PoolID     int64
	PoolName   string
	// GitHubURL is the repository or organization the runner serves.
	GitHubURL  string
	WorkFolder string
	Ephemeral  bool
}

// maxJITConfig bounds the input: real configs are a few kilobytes.
const maxJITConfig = 64 << 10

// DecodeJITConfig reads the runner settings out of an encoded_jit_config:
// base64 of a JSON object whose ".runner" member is base64 of the runner's
// settings file (the one config.sh would write). Keys are matched without
// regard to case and numbers may be JSON numbers or strings, as both forms
// occur. Errors never quote the input: it holds the runner's credentials.
func DecodeJITConfig(encoded string) (JITConfigInfo, error) {
	encoded = strings.TrimSpace(encoded)
	if encoded == "" {
		return JITConfigInfo{}, errors.New("the JIT config is empty")
	}
	if len(encoded) > maxJITConfig {
		return JITConfigInfo{}, errors.New("the JIT config is too large")
	}
	outer, ok := decodeBase64(encoded)
	if !ok {
		return JITConfigInfo{}, errors.New("the JIT config is not base64")
	}
	var files map[string]json.RawMessage
	if json.Unmarshal(outer, &files) != nil {
		return JITConfigInfo{}, errors.New("the JIT config is not a JSON object of files")
	}
	raw, ok := files[".runner"]
	if !ok {
		return JITConfigInfo{}, errors.New("the JIT config has no .runner file")
	}
	var runnerB64 string
	if json.Unmarshal(raw, &runnerB64) != nil {
		return JITConfigInfo{}, errors.New("the JIT config's .runner file is not a string")
	}
	runnerJSON, ok := decodeBase64(runnerB64)
	if !ok {
		return JITConfigInfo{}, errors.New("the JIT config's .runner file is not base64")
	}
	// The runner writes its settings as UTF-8 with a byte-order mark.
	runnerJSON = bytes.TrimPrefix(runnerJSON, []byte("\xef\xbb\xbf"))
	var settings struct {
		AgentID    flexInt  `json:"agentId"`
		AgentName  string   `json:"agentName"`
		PoolID     flexInt  `json:"poolId"`
		PoolName   string   `json:"poolName"`
		GitHubURL  string   `json:"gitHubUrl"`
		WorkFolder string   `json:"workFolder"`
		Ephemeral  flexBool `json:"ephemeral"`
	}
	if json.Unmarshal(runnerJSON, &settings) != nil {
		return JITConfigInfo{}, errors.New("the JIT config's .runner file is not valid runner settings")
	}
	if settings.AgentID <= 0 || settings.AgentName == "" {
		return JITConfigInfo{}, errors.New("the JIT config's .runner file names no runner")
	}
	return JITConfigInfo{
		RunnerID:   int64(settings.AgentID),
		RunnerName: settings.AgentName,
		PoolID:     int64(settings.PoolID),
		PoolName:   settings.PoolName,
		GitHubURL:  settings.GitHubURL,
		WorkFolder: settings.WorkFolder,
		Ephemeral:  bool(settings.Ephemeral),
	}, nil
}

// decodeBase64 accepts standard or URL-safe base64, padded or not.
func decodeBase64(s string) ([]byte, bool) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, true
		}
	}
	return nil, false
}

// flexInt is a JSON number or a string holding one.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*f = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	*f = flexInt(n)
	return nil
}

// flexBool is a JSON boolean or a string "true"/"True"/"false".
type flexBool bool

func (f *flexBool) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*f = false
		return nil
	}
	v, err := strconv.ParseBool(strings.ToLower(s))
	if err != nil {
		return errors.New("not a boolean")
	}
	*f = flexBool(v)
	return nil
}
