package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// ErrSignature is a missing or wrong X-Hub-Signature-256.
var ErrSignature = errors.New("missing or invalid X-Hub-Signature-256")

// VerifySignature checks header ("sha256=<hex>") against the HMAC-SHA256
// of body under secret, in constant time.
func VerifySignature(secret, body []byte, header string) error {
	if len(secret) == 0 {
		return errors.New("no webhook secret configured")
	}
	hexSum, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return ErrSignature
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil || len(got) != sha256.Size {
		return ErrSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrSignature
	}
	return nil
}

// Sign returns the X-Hub-Signature-256 value GitHub sends for body.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
