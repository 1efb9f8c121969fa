// Package attestation holds what a machine's SPIFFE attestation needs on the
// operator's side, apart from the MachineClaim phase that drives it: the
// SPIRE servers a template may name (Registry), the attestation part of a
// machine's user data, and the credential endpoint that hands a workload's
// credentials, once, to the machine that proves with its SVID that it is the
// claim's (Endpoint), with the operator's own serving identity.
package attestation

import _ "github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
