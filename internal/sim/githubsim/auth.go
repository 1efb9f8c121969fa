package githubsim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// GitHub's limits on an App's JSON web token.
const (
	maxJWTLifetime = 10 * time.Minute
	jwtClockSkew   = 60 * time.Second
)

// identity is who a request acts as; it names the rate-limit budget.
type identity struct {
	kind string // "installation", "token", "app"
	key  string // budget key
}

type regToken struct {
	scope   string // lower-case "owner/repo" or "org"
	remove  bool
	expires time.Time
	// seq orders the tokens by when they were minted.
	seq int64
	// registered names the runners config.sh registered with the token.
	registered []string
}

// AppID is the simulated App's ID (the JWT's iss).
func (s *Server) AppID() int64 { return s.opts.AppID }

// InstallationID is the App's installation ID.
func (s *Server) InstallationID() int64 { return s.opts.InstallationID }

// AppPrivateKeyPEM is the App's current private key, PKCS#1 PEM, as GitHub
// hands it out.
func (s *Server) AppPrivateKeyPEM() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.appKeyPEM...)
}

// RotateAppKey generates a new App private key and deletes the old ones: a
// JWT signed with an old key is refused from now on. Installation tokens
// already minted stay valid until they expire, as on GitHub. It returns the
// new key in PEM.
func (s *Server) RotateAppKey() ([]byte, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("githubsim: generating an App key: %w", err)
	}
	return s.SetAppKey(key), nil
}

// SetAppKey makes key the App's only key (see RotateAppKey) and returns it in PEM.
func (s *Server) SetAppKey(key *rsa.PrivateKey) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appKeys = []*rsa.PublicKey{&key.PublicKey}
	s.appKeyPEM = encodeKey(key)
	return append([]byte(nil), s.appKeyPEM...)
}

func encodeKey(key *rsa.PrivateKey) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

// PAT returns a personal access token the server accepts.
func (s *Server) PAT() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	best := ""
	for t := range s.pats {
		if best == "" || t < best {
			best = t
		}
	}
	return best
}

// AddPAT makes token an accepted personal access token.
func (s *Server) AddPAT(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pats[token] = true
}

// RevokePAT stops accepting token.
func (s *Server) RevokePAT(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pats, token)
}

// RevokeInstallationTokens invalidates every installation token minted so far.
func (s *Server) RevokeInstallationTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instTokens = map[string]time.Time{}
}

// InstallationTokens reports how many installation tokens are valid now.
func (s *Server) InstallationTokens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	n := 0
	for _, exp := range s.instTokens {
		if now.Before(exp) {
			n++
		}
	}
	return n
}

// bearer returns the credential of an Authorization header ("token X" or
// "Bearer X", as GitHub accepts both).
func bearer(r *http.Request) string {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	for _, p := range []string{"Bearer ", "bearer ", "token ", "Token "} {
		if rest, ok := strings.CutPrefix(h, p); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}

// authenticate checks an installation token or a personal access token.
// The caller holds s.mu.
func (s *Server) authenticate(r *http.Request) (identity, *apiError) {
	cred := bearer(r)
	if cred == "" {
		return identity{}, &apiError{status: http.StatusUnauthorized, message: "Requires authentication", docURL: docsRoot}
	}
	now := s.clock.Now()
	if exp, ok := s.instTokens[cred]; ok {
		if now.Before(exp) {
			return identity{kind: "installation", key: "installation:" + strconv.FormatInt(s.opts.InstallationID, 10)}, nil
		}
		delete(s.instTokens, cred)
	}
	for pat := range s.pats {
		if subtle.ConstantTimeCompare([]byte(pat), []byte(cred)) == 1 {
			return identity{kind: "token", key: patBudgetKey(pat)}, nil
		}
	}
	return identity{}, &apiError{status: http.StatusUnauthorized, message: "Bad credentials", docURL: docsRoot}
}

// patBudgetKey names a token's budget without holding the token.
func patBudgetKey(pat string) string {
	sum := sha256.Sum256([]byte(pat))
	return "token:" + hex.EncodeToString(sum[:6])
}

// authenticateApp verifies the App's JWT as GitHub does: RS256 with one of
// the App's keys, iss the App ID, iat not in the future, exp in the future
// and at most ten minutes ahead. The caller holds s.mu.
func (s *Server) authenticateApp(r *http.Request) (identity, *apiError) {
	raw := bearer(r)
	if raw == "" {
		return identity{}, &apiError{status: http.StatusUnauthorized, message: "A JSON web token could not be decoded", docURL: docsRoot}
	}
	undecodable := &apiError{status: http.StatusUnauthorized, message: "A JSON web token could not be decoded", docURL: docsRoot}
	claims := jwt.MapClaims{}
	var verified bool
	for _, key := range s.appKeys {
		parser := jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodRS256.Alg()}), jwt.WithoutClaimsValidation())
		if _, err := parser.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return key, nil }); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return identity{}, undecodable
	}
	if iss, ok := numericClaim(claims["iss"]); !ok || iss != s.opts.AppID {
		return identity{}, &apiError{status: http.StatusUnauthorized, message: "'Issuer' claim ('iss') must be an Integer", docURL: docsRoot}
	}
	now := s.clock.Now()
	iat, ok := numericClaim(claims["iat"])
	if !ok {
		return identity{}, &apiError{status: http.StatusUnauthorized,
			message: "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued", docURL: docsRoot}
	}
	if time.Unix(iat, 0).After(now.Add(jwtClockSkew)) {
		return identity{}, &apiError{status: http.StatusUnauthorized,
			message: "'Issued at' claim ('iat') must be an Integer representing a time in the past", docURL: docsRoot}
	}
	exp, ok := numericClaim(claims["exp"])
	if !ok || !time.Unix(exp, 0).After(now) {
		return identity{}, &apiError{status: http.StatusUnauthorized,
			message: "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires", docURL: docsRoot}
	}
	if time.Unix(exp, 0).After(now.Add(maxJWTLifetime + jwtClockSkew)) {
		return identity{}, &apiError{status: http.StatusUnauthorized, message: "'Expiration time' claim ('exp') is too far in the future", docURL: docsRoot}
	}
	return identity{kind: "app", key: "app:" + strconv.FormatInt(s.opts.AppID, 10)}, nil
}

// numericClaim reads a claim that is a JSON number or a decimal string (GitHub
// accepts the App ID as either).
func numericClaim(v any) (int64, bool) {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<53 {
			return 0, false
		}
		return int64(n), true
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// handleAccessToken is POST /app/installations/{installation_id}/access_tokens.
func (s *Server) handleAccessToken(rc *reqCtx) (int, any, *apiError) {
	id, err := strconv.ParseInt(rc.r.PathValue("installation_id"), 10, 64)
	if err != nil || id != s.opts.InstallationID {
		return 0, nil, notFound()
	}
	now := s.clock.Now()
	tok := "ghs_" + randomAlnum(36)
	exp := now.Add(s.opts.InstallationTokenTTL)
	s.instTokens[tok] = exp
	return http.StatusCreated, map[string]any{
		"token":      tok,
		"expires_at": exp.UTC().Format(time.RFC3339),
		"permissions": map[string]string{
			"administration":                   "write",
			"organization_self_hosted_runners": "write",
			"metadata":                         "read",
			"actions":                          "read",
		},
		"repository_selection": "all",
	}, nil
}

// newRegToken mints a registration or remove token for scope. The caller
// holds s.mu.
func (s *Server) newRegToken(scope string, remove bool) (string, time.Time) {
	tok := randomAlnum(29, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
	exp := s.clock.Now().Add(s.opts.RegistrationTokenTTL)
	s.regTokenSeq++
	s.regTokens[tok] = regToken{scope: scope, remove: remove, expires: exp, seq: s.regTokenSeq}
	return tok, exp
}

// RegistrationTokenUses lists the registration tokens minted for scope
// ("owner/repo" or an organization), oldest first, each as the names of
// the runners config.sh registered with it (empty for a token never used):
// a test sees whether one token served several runners without any token
// value leaving the simulator. An expired token presented again is dropped.
func (s *Server) RegistrationTokenUses(scope string) [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	scope = strings.ToLower(scope)
	var toks []regToken
	for _, rt := range s.regTokens {
		if rt.scope == scope && !rt.remove {
			toks = append(toks, rt)
		}
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i].seq < toks[j].seq })
	out := make([][]string, len(toks))
	for i, rt := range toks {
		out[i] = append([]string{}, rt.registered...)
	}
	return out
}

// checkRegToken validates a registration (or remove) token for scope. The
// caller holds s.mu.
func (s *Server) checkRegToken(tok, scope string, remove bool) *apiError {
	rt, ok := s.regTokens[tok]
	if !ok || rt.remove != remove || rt.scope != scope {
		return errf(http.StatusNotFound, "Invalid configuration provided for token. Please provide a valid token for %s", scope)
	}
	if !s.clock.Now().Before(rt.expires) {
		delete(s.regTokens, tok)
		return errf(http.StatusUnauthorized, "The token has expired. Please generate a new one.")
	}
	return nil
}
