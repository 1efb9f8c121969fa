package attestation

// DecodeRequest exposes decodeRequest's outcome to the external tests: the
// machine a request speaks for, or the status code and result it is refused
// with.
func DecodeRequest(method, path, peer string, body []byte, installation string) (machine string, code int, result string) {
	m, refused := decodeRequest(method, path, peer, body, installation)
	if refused != nil {
		return "", refused.code, refused.result
	}
	return m.String(), 0, ""
}
