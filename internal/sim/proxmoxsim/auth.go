package proxmoxsim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"
)

type ticketInfo struct {
	user    string
	csrf    string
	expires time.Time
}

// SetAPIToken replaces the accepted API token (rotation): from now on only
// tokenID with secret authenticates; the previous token fails at once.
func (s *Server) SetAPIToken(tokenID, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenID, s.tokenSecret = tokenID, secret
}

// APIToken returns the currently accepted token ID and secret.
func (s *Server) APIToken() (tokenID, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenID, s.tokenSecret
}

// SetUserPassword sets (or adds) a user's password for /access/ticket; the
// old password fails at once. Tickets already issued stay valid until they
// expire, as in Proxmox; call RevokeTickets to end them too.
func (s *Server) SetUserPassword(user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[user] = password
}

// Credentials returns the default user (Options.Username) and its current password.
func (s *Server) Credentials() (user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Username, s.users[s.opts.Username]
}

// RevokeTickets invalidates every issued login ticket, as if they all expired.
func (s *Server) RevokeTickets() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tickets = map[string]ticketInfo{}
}

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("proxmoxsim: reading random bytes: %v", err))
	}
	return base64.RawStdEncoding.EncodeToString(b)
}

// authenticate returns the user or token the request acts as. The caller
// must hold s.mu.
func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	if h := r.Header.Get("Authorization"); h != "" {
		rest, ok := strings.CutPrefix(h, "PVEAPIToken=")
		if !ok {
			rest, ok = strings.CutPrefix(h, "PVEAPIToken ")
		}
		if !ok {
			return "", errf(http.StatusUnauthorized, "invalid authorization header")
		}
		id, secret, ok := strings.Cut(strings.TrimSpace(rest), "=")
		if !ok || !strings.Contains(id, "!") || !strings.Contains(id, "@") {
			return "", errf(http.StatusUnauthorized, "invalid token value!")
		}
		if id != s.tokenID || subtle.ConstantTimeCompare([]byte(secret), []byte(s.tokenSecret)) != 1 {
			return "", errf(http.StatusUnauthorized, "invalid token value!")
		}
		return id, nil
	}
	c, err := r.Cookie("PVEAuthCookie")
	if err != nil || c.Value == "" {
		return "", errf(http.StatusUnauthorized, "No ticket")
	}
	ti, ok := s.tickets[c.Value]
	if !ok || time.Now().After(ti.expires) {
		delete(s.tickets, c.Value)
		return "", errf(http.StatusUnauthorized, "permission denied - invalid PVE ticket")
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if tok := r.Header.Get("CSRFPreventionToken"); tok == "" || tok != ti.csrf {
			return "", errf(http.StatusUnauthorized, "Permission denied - invalid csrf token")
		}
	}
	return ti.user, nil
}

// handleTicket implements POST /access/ticket: a login with a password, or
// a renewal with a still valid ticket as the password.
func (s *Server) handleTicket(rc *reqCtx) (any, *apiError) {
	user := rc.params["username"]
	pass := rc.params["password"]
	if user == "" {
		return nil, paramErr("username", "property is missing and it is not optional")
	}
	if pass == "" {
		return nil, paramErr("password", "property is missing and it is not optional")
	}
	if realm := rc.params["realm"]; realm != "" && !strings.Contains(user, "@") {
		user += "@" + realm
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := false
	if want, exists := s.users[user]; exists && subtle.ConstantTimeCompare([]byte(pass), []byte(want)) == 1 {
		ok = true
	}
	if !ok && strings.HasPrefix(pass, "PVE:") {
		if ti, exists := s.tickets[pass]; exists && ti.user == user && time.Now().Before(ti.expires) {
			ok = true
		}
	}
	if !ok {
		return nil, errf(http.StatusUnauthorized, "authentication failure")
	}
	now := time.Now()
	ticket := fmt.Sprintf("PVE:%s:%08X::%s", user, now.Unix(), randomToken(256))
	csrf := fmt.Sprintf("%08X:%s", now.Unix(), randomToken(32))
	s.tickets[ticket] = ticketInfo{user: user, csrf: csrf, expires: now.Add(s.opts.TicketLifetime)}
	return map[string]any{
		"username":            user,
		"ticket":              ticket,
		"CSRFPreventionToken": csrf,
		"clustername":         s.opts.ClusterName,
		"cap": map[string]map[string]int{
			"vms":     {"VM.Allocate": 1, "VM.Clone": 1, "VM.Config.Disk": 1, "VM.PowerMgmt": 1, "VM.Audit": 1},
			"storage": {"Datastore.Allocate": 1, "Datastore.AllocateSpace": 1, "Datastore.Audit": 1},
			"nodes":   {"Sys.Audit": 1},
		},
	}, nil
}
