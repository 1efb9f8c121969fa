package runnerpool

import (
	"encoding/json"

	"github.com/hyperfleet/hyperfleet/providers/github/runnerconfig"
)

// credentialsKey is the bootstrap Secret's key holding the runner's
// credential when the machine attests (spec.credentialsSecretRef).
const credentialsKey = "credentials"

// runnerCredentials moves the runner's credential out of cfg into the JSON
// the credential endpoint hands out (spire.Credentials: jitConfig, or
// token and url), leaving cfg with nothing secret in it.
func runnerCredentials(cfg *runnerconfig.Config) (string, error) {
	creds := map[string]string{}
	if cfg.JITConfig != "" {
		creds["jitConfig"] = cfg.JITConfig
	}
	if cfg.Token != "" {
		creds["token"], creds["url"] = cfg.Token, cfg.URL
	}
	data, err := json.Marshal(creds)
	if err != nil {
		return "", err
	}
	cfg.JITConfig, cfg.Token = "", ""
	return string(data), nil
}
