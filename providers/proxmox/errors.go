package proxmox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/luthermonson/go-proxmox"

	"github.com/hyperfleet/hyperfleet/providers"
)

// classify turns a go-proxmox error into the provider contract's errors.
// go-proxmox reports a Proxmox 500 as errors.New(res.Status), and Proxmox puts
// its message in the status line, so the text is all there is to match on.
// "already exists" is not ErrNameTaken here: only the clone call itself can
// tell that its VMID is taken (see vmidTaken); the same words from another
// step (a storage volume, a cloud-init ISO) must not move a claim to a new
// VMID, which would leave a twin behind.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	wrap := func(e error) error { return fmt.Errorf("%s: %w", op, e) }
	var (
		unknownCA *x509.UnknownAuthorityError
		hostname  x509.HostnameError
		verify    *tls.CertificateVerificationError
		netErr    net.Error
	)
	msg := err.Error()
	switch {
	case proxmox.IsNotAuthorized(err):
		return wrap(providers.Permanent("AuthenticationFailed",
			"Proxmox refused the credentials: check tokenID/tokenSecret (or username/password) in the credentials Secret and the token's privileges", err))
	case errors.As(err, &unknownCA), errors.As(err, &verify), errors.As(err, &hostname):
		return wrap(providers.Permanent("TLSVerificationFailed",
			"the Proxmox API certificate is not trusted: put the CA that signed it in spec.tls.caBundleRef (or set spec.tls.serverName)", err))
	case strings.Contains(msg, "does not exist"), strings.Contains(msg, "no such VM"),
		// A task Proxmox no longer knows: 400 {"errors":{"upid":"no such
		// task"}} (pve-manager PVE::API2::Tasks), which go-proxmox reports as
		// a bad request; it is gone, not a request a person must fix.
		strings.Contains(msg, "no such task"):
		return wrap(fmt.Errorf("%w: %s", providers.ErrNotFound, msg))
	case strings.Contains(msg, "is locked"), strings.Contains(msg, "can't lock file"), strings.Contains(msg, "got timeout"):
		return wrap(providers.Transient("HypervisorBusy", 5*time.Second, err))
	case errors.Is(err, context.DeadlineExceeded), proxmox.IsTimeout(err), errors.As(err, &netErr):
		return wrap(providers.Transient("HypervisorUnreachable", 15*time.Second, err))
	case strings.HasPrefix(msg, "bad request"):
		return wrap(providers.Permanent("RequestRejected", fmt.Sprintf("Proxmox rejected %s: %s; check the template's and cluster's settings", op, strings.TrimPrefix(msg, "bad request: ")), nil))
	case strings.HasPrefix(msg, "5"), strings.Contains(msg, "EOF"), strings.Contains(msg, "connection reset"):
		return wrap(providers.Transient("HypervisorError", 10*time.Second, err))
	}
	return wrap(providers.Transient("HypervisorError", 10*time.Second, err))
}

// vmidTaken reports whether a clone call was refused because its new VMID's
// config already exists ("unable to create VM N: config file already
// exists"), the one error that means the VMID is in use.
func vmidTaken(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}
