package simkit

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
)

// DropConnection closes the client's connection without any answer, as a
// crashed proxy or a network cut would. Where the connection cannot be
// hijacked (HTTP/2, a recorder) it aborts the response instead.
//
// Go's HTTP client silently retries an idempotent request (GET) sent on a
// reused connection, so a single dropped GET may go unnoticed by a client.
func DropConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// RandomUUID returns a random (version 4) UUID, the shape both APIs use for
// generated secrets and identifiers. It panics only if the system's random
// source fails.
func RandomUUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("simkit: reading random bytes: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
