package spire

// MachineConfigPath is where a machine's cloud-init writes its
// MachineConfig (0600, in a root-only directory); hyperfleet-bootstrap
// reads it and deletes it at once, as it does its own configuration.
const MachineConfigPath = "/etc/hyperfleet/attestation.json"

// CredentialsPath is the credential endpoint's one path. A machine POSTs to
// it over mTLS with its X509-SVID; the answer is 200 with Credentials as
// JSON once, 204 when the machine's workload has no credentials (it has
// attested and gets nothing else), and an error status otherwise:
// 403 not this machine's, 404 no such machine, 409 already handed out,
// 410 past the deadline or the machine ending, 503 try again.
const CredentialsPath = "/v1/credentials"

// Attestation methods of a MachineConfig.
const (
	MethodJoinToken = "join-token"
	MethodTPM       = "tpm"
)

// MachineConfig is what the operator hands an attesting machine in its user
// data: everything its SPIRE agent needs to attest, and where to fetch its
// workload's credentials afterwards. With a join token it holds a secret:
// the file is deleted once read, and the token is single-use and
// short-lived. With tpm it holds none: the machine's TPM holds its DevID.
type MachineConfig struct {
	// Method is join-token (also when empty) or tpm (SPIRE's tpm_devid
	// node attestor, with the DevID devid.Read finds in the machine's TPM).
	Method string `json:"method,omitempty"`
	// JoinToken the agent attests with (never on a command line: it goes
	// into the agent's join_token_file); empty with tpm.
	JoinToken string `json:"joinToken,omitempty"`
	// ServerAddress host:port of the SPIRE server, as the machine reaches it.
	ServerAddress string `json:"serverAddress"`
	TrustDomain   string `json:"trustDomain"`
	// TrustBundle (PEM) the agent verifies the server with on first contact.
	TrustBundle string `json:"trustBundle"`
	// SPIFFEID the machine's bootstrap agent must be issued: the workload
	// ID minted for exactly this machine.
	SPIFFEID string `json:"spiffeID"`
	// CredentialEndpoint is the operator's credential endpoint URL
	// (https://host:port/v1/credentials); EndpointID the SPIFFE ID it must
	// present. Empty: the machine only attests.
	CredentialEndpoint string `json:"credentialEndpoint,omitempty"`
	EndpointID         string `json:"endpointID,omitempty"`
}

// Credentials is the credential endpoint's answer: the workload's
// credentials by name. For a GitHub runner: jitConfig, or token and url.
type Credentials map[string]string

// EndpointID is the credential endpoint's SPIFFE ID for an installation.
func EndpointID(trustDomain, installation string) string {
	return InstallationPrefix(trustDomain, installation) + "credential-endpoint"
}

// BootstrapWorkload is the name of the workload entry HyperFleet registers
// on every attested machine: the bootstrap agent that attests and fetches
// the credentials (MachineID.Workload(BootstrapWorkload)).
const BootstrapWorkload = "bootstrap"
