// Package devid provisions and reads the DevID credential SPIRE's tpm_devid
// node attestor proves a machine's identity with: a signing key that lives
// in the machine's TPM (only the TPM can use its private part) and a
// certificate for it from the platform's DevID authority.
//
// Who does what (docs/attestation.md, "TPM attestation"):
//   - The hypervisor host provisions each machine's (virtual) TPM before the
//     machine first boots, the way it already manufactures the vTPM's
//     endorsement key and certificate (swtpm_setup): Provision creates the
//     DevID key inside that TPM, has Authority certify it with the machine's
//     claim UID as subject CN, and stores the certificate and the key's
//     TPM-wrapped blobs in one NV index of the same TPM. The authority's key
//     stays on the host.
//   - The machine reads them back (Read) and hands them to its spire-agent
//     as files. Nothing in them is secret: the private blob is wrapped by the
//     TPM's storage key and is of no use outside that TPM.
//   - The SPIRE server checks the chain to the DevID authority, that the key
//     is resident in a TPM whose endorsement certificate chains to the
//     manufacturer (swtpm_localca for a vTPM), and the possession of the key.
//     HyperFleet's node alias selects the agent by the certificate's subject
//     CN (spire.Server.CreateTPMAlias).
package devid

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // SPIRE names agents by the SHA-1 fingerprint
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"time"

	"github.com/google/go-tpm/legacy/tpm2"
	"github.com/google/go-tpm/tpmutil"
)

// NVIndex is the owner-range NV index HyperFleet keeps a machine's DevID
// credential in ("HF" 01).
const NVIndex tpmutil.Handle = 0x01484601

// maxChunk is the most an NV write carries: TPM_PT_NV_BUFFER_MAX is 1024 on
// libtpms (swtpm) and at least that on hardware TPMs.
const maxChunk = 1024

// Credential is a machine's DevID, as spire-agent's tpm_devid plugin reads
// it: devid_cert_path (CertPEM), devid_pub_path and devid_priv_path (the
// TPM2B blobs TPM2_Create returned).
type Credential struct {
	CertPEM []byte
	Public  []byte
	Private []byte
}

// Authority is a DevID certificate authority: the platform's, kept on the
// hypervisor hosts; its certificate is the SPIRE server's devid_ca_path.
type Authority struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewAuthority makes a self-signed ECDSA P-256 authority named cn, valid
// for a year: for tests and the sandbox, where nobody brings one.
func NewAuthority(cn string) (Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Authority{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return Authority{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Authority{}, err
	}
	return Authority{Cert: cert, Key: key}, nil
}

// CertPEM is the authority's certificate as PEM (the server's devid_ca_path).
func (a Authority) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Cert.Raw})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// srkTemplate is the TCG's high-range RSA storage root key (H-2 in the EK
// credential profile), the parent spire-agent recreates to load the DevID:
// a primary key is derived from the owner seed and this template, so the
// two must agree bit for bit or the blobs do not load (TestAgentAttests
// proves they do).
func srkTemplate() tpm2.Public {
	return tpm2.Public{
		Type:       tpm2.AlgRSA,
		NameAlg:    tpm2.AlgSHA256,
		Attributes: tpm2.FlagStorageDefault | tpm2.FlagNoDA,
		RSAParameters: &tpm2.RSAParams{
			Symmetric: &tpm2.SymScheme{Alg: tpm2.AlgAES, KeyBits: 128, Mode: tpm2.AlgCFB},
			KeyBits:   2048,
		},
	}
}

// keyTemplate is a DevID signing key as "TPM 2.0 Keys for Device Identity
// and Attestation" (7.3.4.1) describes it: it never leaves this TPM
// (fixedTPM, fixedParent) and was made inside it (sensitiveDataOrigin).
func keyTemplate() tpm2.Public {
	return tpm2.Public{
		Type:    tpm2.AlgRSA,
		NameAlg: tpm2.AlgSHA256,
		Attributes: tpm2.FlagSign | tpm2.FlagFixedTPM | tpm2.FlagFixedParent |
			tpm2.FlagSensitiveDataOrigin | tpm2.FlagUserWithAuth,
		RSAParameters: &tpm2.RSAParams{
			Sign:    &tpm2.SigScheme{Alg: tpm2.AlgRSASSA, Hash: tpm2.AlgSHA256},
			KeyBits: 2048,
		},
	}
}

// Provision creates a DevID key in the TPM behind rw, certifies it with ca
// for commonName (the machine's claim UID) and stores the credential in
// NVIndex, replacing one stored before. The owner hierarchy's password must
// be empty, as on a freshly manufactured vTPM.
func Provision(rw io.ReadWriter, ca Authority, commonName string) (Credential, error) {
	if commonName == "" {
		return Credential{}, errors.New("devid: a DevID needs a subject common name (the machine's claim UID)")
	}
	srk, _, _, _, _, _, err := tpm2.CreatePrimaryEx(rw, tpm2.HandleOwner, tpm2.PCRSelection{}, "", "", srkTemplate())
	if err != nil {
		return Credential{}, fmt.Errorf("devid: create the storage root key: %w", err)
	}
	defer func() { _ = tpm2.FlushContext(rw, srk) }()
	priv, pubBlob, _, _, _, err := tpm2.CreateKey(rw, srk, tpm2.PCRSelection{}, "", "", keyTemplate())
	if err != nil {
		return Credential{}, fmt.Errorf("devid: create the DevID key: %w", err)
	}
	pub, err := tpm2.DecodePublic(pubBlob)
	if err != nil {
		return Credential{}, fmt.Errorf("devid: decode the DevID key: %w", err)
	}
	key, err := pub.Key()
	if err != nil {
		return Credential{}, fmt.Errorf("devid: the DevID public key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key, ca.Key)
	if err != nil {
		return Credential{}, fmt.Errorf("devid: certify the DevID key: %w", err)
	}
	c := Credential{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Public:  pubBlob,
		Private: priv,
	}
	b, err := c.encode()
	if err != nil {
		return Credential{}, err
	}
	return c, store(rw, b)
}

// Read returns the credential Provision stored in the TPM behind rw.
func Read(rw io.ReadWriter) (Credential, error) {
	b, err := tpm2.NVReadEx(rw, NVIndex, tpm2.HandleOwner, "", 0)
	if err != nil {
		return Credential{}, fmt.Errorf("devid: read NV index %#x (was the TPM provisioned with a DevID?): %w", uint32(NVIndex), err)
	}
	return decode(b)
}

// maxNVSize is the most one NV index holds on libtpms (MAX_NV_INDEX_SIZE);
// a DevID's three parts take about 1.3 KiB.
const maxNVSize = 2048

// ReadPath opens the TPM at path (Open) and Reads the credential from it.
func ReadPath(path string) (Credential, error) {
	rw, err := Open(path)
	if err != nil {
		return Credential{}, fmt.Errorf("devid: open the TPM %s: %w", path, err)
	}
	// A software TPM's socket connection closes after each command, and
	// closing it again fails: only a device needs this.
	defer func() { _ = rw.Close() }()
	c, err := Read(rw)
	if err != nil {
		return Credential{}, fmt.Errorf("the TPM %s: %w", path, err)
	}
	return c, nil
}

// store writes b into NVIndex, defining it at b's size first.
func store(rw io.ReadWriter, b []byte) error {
	size, err := u16(len(b))
	if err != nil || size > maxNVSize {
		return fmt.Errorf("devid: the DevID is %d bytes, more than an NV index holds (%d)", len(b), maxNVSize)
	}
	if _, err := tpm2.NVReadPublic(rw, NVIndex); err == nil {
		if err := tpm2.NVUndefineSpace(rw, "", tpm2.HandleOwner, NVIndex); err != nil {
			return fmt.Errorf("devid: remove the previous DevID from NV index %#x: %w", uint32(NVIndex), err)
		}
	}
	attrs := tpm2.AttrOwnerWrite | tpm2.AttrOwnerRead | tpm2.AttrNoDA
	if err := tpm2.NVDefineSpace(rw, tpm2.HandleOwner, NVIndex, "", "", nil, attrs, size); err != nil {
		return fmt.Errorf("devid: define NV index %#x (%d bytes): %w", uint32(NVIndex), len(b), err)
	}
	for off := uint16(0); off < size; off += maxChunk {
		end := min(off+maxChunk, size)
		if err := tpm2.NVWrite(rw, tpm2.HandleOwner, NVIndex, "", b[off:end], off); err != nil {
			return fmt.Errorf("devid: write NV index %#x: %w", uint32(NVIndex), err)
		}
	}
	return nil
}

// encode lays the three parts out as 16-bit length-prefixed fields: an NV
// index is one blob, and the TPM's own size limit (2048 on libtpms) fits
// them with room to spare.
func (c Credential) encode() ([]byte, error) {
	var b bytes.Buffer
	for _, part := range [][]byte{c.CertPEM, c.Public, c.Private} {
		n, err := u16(len(part))
		if err != nil {
			return nil, err
		}
		_ = binary.Write(&b, binary.BigEndian, n)
		b.Write(part)
	}
	return b.Bytes(), nil
}

// u16 is n as a uint16, or an error when it does not fit.
func u16(n int) (uint16, error) {
	if n < 0 || n > math.MaxUint16 {
		return 0, fmt.Errorf("devid: %d does not fit in 16 bits", n)
	}
	return uint16(n), nil
}

func decode(b []byte) (Credential, error) {
	var parts [3][]byte
	for i := range parts {
		if len(b) < 2 {
			return Credential{}, errors.New("devid: the stored DevID is truncated")
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return Credential{}, errors.New("devid: the stored DevID is truncated")
		}
		parts[i], b = b[2:2+n], b[2+n:]
	}
	if blk, _ := pem.Decode(parts[0]); blk == nil || blk.Type != "CERTIFICATE" {
		return Credential{}, errors.New("devid: the stored DevID certificate is not PEM")
	}
	return Credential{CertPEM: parts[0], Public: parts[1], Private: parts[2]}, nil
}

// Open opens the TPM at path: a character device (/dev/tpmrm0) or a Unix
// socket a software TPM serves (swtpm's unixio server).
func Open(path string) (io.ReadWriteCloser, error) {
	return tpmutil.OpenTPM(path)
}

// LoadAuthority reads a DevID authority's certificate and private key
// (PEM: PKCS #8, SEC 1 EC or PKCS #1 RSA).
func LoadAuthority(certPEM, keyPEM []byte) (Authority, error) {
	blk, _ := pem.Decode(certPEM)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return Authority{}, errors.New("devid: the authority's certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return Authority{}, fmt.Errorf("devid: the authority's certificate: %w", err)
	}
	if !cert.IsCA {
		return Authority{}, errors.New("devid: the authority's certificate is not a CA certificate (basicConstraints CA:TRUE)")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return Authority{}, errors.New("devid: the authority's key is not PEM")
	}
	var key any
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		return Authority{}, fmt.Errorf("devid: the authority's key is a PEM %q, want PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY", kb.Type)
	}
	if err != nil {
		return Authority{}, fmt.Errorf("devid: the authority's key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return Authority{}, fmt.Errorf("devid: the authority's key (%T) cannot sign", key)
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return Authority{}, errors.New("devid: the authority's key does not match its certificate")
	}
	return Authority{Cert: cert, Key: signer}, nil
}

// KeyPEM is the authority's key as PKCS #8 PEM, for LoadAuthority.
func (a Authority) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(a.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Fingerprint is the SHA-1 of the DevID certificate, as SPIRE's tpm_devid
// attestor names the agent: spiffe://<td>/spire/agent/tpm_devid/<Fingerprint>.
func (c Credential) Fingerprint() (string, error) {
	blk, _ := pem.Decode(c.CertPEM)
	if blk == nil {
		return "", errors.New("devid: the DevID certificate is not PEM")
	}
	sum := sha1.Sum(blk.Bytes) //nolint:gosec // SPIRE names agents by the SHA-1 fingerprint
	return hex.EncodeToString(sum[:]), nil
}
