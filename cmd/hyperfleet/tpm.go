//go:build !hourglass

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hyperfleet/hyperfleet/providers/spire/devid"
)

// runTPMProvision is what a hypervisor host runs for a machine that attests
// with its TPM (attestation.method tpm), before the machine first boots:
// it creates a DevID key inside the machine's (v)TPM, certifies it with the
// platform's DevID CA for the claim's UID and stores the credential in the
// TPM, where the machine's hyperfleet-bootstrap reads it. The CA's key
// never leaves the host.
func runTPMProvision(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tpm-provision", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tpm := fs.String("tpm", "", "The machine's TPM: a device (/dev/tpmrm0) or a software TPM's Unix socket (swtpm socket --server type=unixio,path=...).")
	caCert := fs.String("devid-ca-cert", "", "PEM file: the DevID CA's certificate (the SPIRE server's tpm_devid devid_ca_path).")
	caKey := fs.String("devid-ca-key", "", "PEM file: the DevID CA's private key.")
	cn := fs.String("common-name", "", "The DevID certificate's subject CN: the MachineClaim's UID (the hyperfleet.io/owner-uid label of a KubeVirt VM, the owner tag of a Proxmox VM).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var missing []error
	for name, v := range map[string]string{"--tpm": *tpm, "--devid-ca-cert": *caCert, "--devid-ca-key": *caKey, "--common-name": *cn} {
		if v == "" {
			missing = append(missing, fmt.Errorf("%s is required", name))
		}
	}
	if err := errors.Join(missing...); err != nil {
		return err
	}
	certPEM, err := os.ReadFile(*caCert)
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(*caKey)
	if err != nil {
		return err
	}
	ca, err := devid.LoadAuthority(certPEM, keyPEM)
	if err != nil {
		return err
	}
	rw, err := devid.Open(*tpm)
	if err != nil {
		return fmt.Errorf("opening the TPM %s: %w", *tpm, err)
	}
	// A software TPM's socket connection closes after each command.
	defer func() { _ = rw.Close() }()
	c, err := devid.Provision(rw, ca, *cn)
	if err != nil {
		return err
	}
	fp, err := c.Fingerprint()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "Provisioned a DevID for %s into %s (NV index %#x). Its agent will attest as spiffe://<trust domain>/spire/agent/tpm_devid/%s\n",
		*cn, *tpm, uint32(devid.NVIndex), fp)
	return err
}
