package proxmoxsim

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hyperfleet/hyperfleet/internal/sim/simkit"
)

// apiPrefix is where the Proxmox JSON API lives.
const apiPrefix = "/api2/json"

// Server is a simulated Proxmox VE cluster reachable over HTTPS. Create it
// with New, start it with Start or StartOn, and stop it with Close.
type Server struct {
	opts Options

	// kit runs the server's lifetime: listener, timers, delays, Close.
	kit    *simkit.Base
	faults *simkit.Faults[Fault]

	mu  sync.Mutex
	lat Latencies

	nodes     map[string]*nodeState
	nodeOrder []string
	stores    map[string]*storageInst // key: storeKey(node, name)
	vms       map[int]*vmState
	tasks     map[string]*taskState
	taskOrder []string

	tokenID, tokenSecret string
	users                map[string]string
	tickets              map[string]ticketInfo

	opCounts  map[Operation]int
	reqCounts map[string]int // "METHOD path" -> count

	storageLocks map[string]int // lock key -> clones holding it
	// cloneTargets holds, per new VMID, the clone task that took its config
	// lock: a second clone to the same VMID fails on that lock, as qmclone's
	// lock_config_full on the new VMID does.
	cloneTargets map[int]*taskState

	nextPID   int
	pstart    uint64
	ipCounter int
	macSeq    uint32

	// caPEM is the CA that signed the TLS certificate, set by StartOn.
	caPEM []byte
}

// New builds a simulated cluster from opts (see Options for the defaults).
// It does not listen yet: call Start or StartOn, or mount Handler yourself.
func New(opts Options) *Server {
	o := opts.withDefaults()
	s := &Server{
		opts:         o,
		faults:       simkit.NewFaults[Fault]("proxmoxsim"),
		lat:          o.Latencies,
		nodes:        map[string]*nodeState{},
		stores:       map[string]*storageInst{},
		vms:          map[int]*vmState{},
		tasks:        map[string]*taskState{},
		tokenID:      o.APITokenID,
		tokenSecret:  o.APITokenSecret,
		users:        map[string]string{o.Username: o.Password},
		tickets:      map[string]ticketInfo{},
		opCounts:     map[Operation]int{},
		reqCounts:    map[string]int{},
		storageLocks: map[string]int{},
		cloneTargets: map[int]*taskState{},
		nextPID:      10000,
		pstart:       1000000,
	}
	s.kit = simkit.New(simkit.Options{Name: "proxmoxsim", ErrorLog: o.ErrorLog}, &s.mu)
	now := time.Now()
	for i, n := range o.Nodes {
		s.nodes[n.Name] = &nodeState{cfg: n, online: !n.Offline, id: i + 1, since: now, ip: fmt.Sprintf("192.0.2.%d", 11+i)}
		s.nodeOrder = append(s.nodeOrder, n.Name)
	}
	for i := range o.Storages {
		st := &s.opts.Storages[i]
		if st.Shared {
			s.stores[storeKey("", st.Name)] = newStorageInst(st, "")
			continue
		}
		for _, n := range s.nodeOrder {
			if storageOnNode(st, n) {
				s.stores[storeKey(n, st.Name)] = newStorageInst(st, n)
			}
		}
	}
	return s
}

// Start serves the API over TLS on 127.0.0.1 with a random port, using a
// certificate signed by a fresh self-signed CA (see CACertPEM).
func (s *Server) Start() error {
	return s.StartOn("127.0.0.1:0")
}

// StartOn serves the API over TLS on addr (host:port); the certificate is
// valid for 127.0.0.1, ::1, localhost and addr's host.
func (s *Server) StartOn(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("proxmoxsim: bad address %q: %w", addr, err)
	}
	caPEM, cert, err := makeCertificates(host)
	if err != nil {
		return err
	}
	tlsCfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"}, // pveproxy speaks HTTP/1.1 only
	}
	// Holding s.mu while the kit starts makes the URL and its CA appear together.
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.kit.Serve(addr, s, simkit.ServeConfig{TLS: tlsCfg, Path: apiPrefix}); err != nil {
		return err
	}
	s.caPEM = caPEM
	return nil
}

// URL is the API base URL to hand to proxmox.NewClient, for example
// https://127.0.0.1:41234/api2/json. It is empty before Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kit.URL()
}

// CACertPEM is the PEM-encoded CA certificate that signed the server's TLS
// certificate, so clients can verify TLS instead of skipping verification.
func (s *Server) CACertPEM() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.caPEM...)
}

// Handler returns the API as an http.Handler for callers that serve it
// themselves (for example with httptest). Status-line messages and dropped
// connections need a hijackable HTTP/1.1 connection; elsewhere the standard
// status text is used and drops abort the response.
func (s *Server) Handler() http.Handler { return s }

// Close stops listening, ends hung requests, stops every pending timer and
// waits until no goroutine of the simulator is left. It is safe to call more
// than once.
func (s *Server) Close() { s.kit.Close() }

// ---------------------------------------------------------------------------
// responses

// apiError is an error answer in Proxmox's style: the message goes into the
// HTTP status line and the body; parameter errors also list per-field errors.
type apiError struct {
	status  int
	msg     string
	errors  map[string]string
	noBody  bool // pveproxy-level errors (e.g. 595) carry no JSON body
	rawBody *string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s", e.status, e.msg) }

func errf(status int, format string, args ...any) *apiError {
	return &apiError{status: status, msg: fmt.Sprintf(format, args...)}
}

// failf is the common 500 that a Proxmox API handler's die() produces.
func failf(format string, args ...any) *apiError {
	return errf(http.StatusInternalServerError, format, args...)
}

// paramErr is Proxmox's 400 "Parameter verification failed." with details.
func paramErr(field, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", errors: map[string]string{field: msg}}
}

func paramErrs(errs map[string]string) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: "Parameter verification failed.", errors: errs}
}

func writeData(w http.ResponseWriter, data any) {
	body, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		writeError(w, failf("internal error encoding response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Cache-Control", "max-age=0")
	w.Header().Set("Pragma", "no-cache")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// writeError sends e with its message as the status line's reason phrase,
// which is where Proxmox (and therefore go-proxmox) carries error text.
func writeError(w http.ResponseWriter, e *apiError) {
	reason := sanitizeReason(e.msg)
	if reason == "" {
		reason = http.StatusText(e.status)
	}
	var body []byte
	switch {
	case e.rawBody != nil:
		body = []byte(*e.rawBody)
	case e.noBody:
	default:
		m := map[string]any{"data": nil}
		if e.msg != "" {
			m["message"] = strings.TrimRight(e.msg, "\n") + "\n"
		}
		if len(e.errors) > 0 {
			m["errors"] = e.errors
		}
		body, _ = json.Marshal(m)
	}
	if hj, ok := w.(http.Hijacker); ok {
		conn, rw, err := hj.Hijack()
		if err == nil {
			defer func() { _ = conn.Close() }()
			writeRawResponse(rw, e.status, reason, body)
			return
		}
	}
	if len(body) > 0 {
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	_, _ = w.Write(body) //nolint:gosec // a JSON error body served as application/json, never HTML
}

func writeRawResponse(rw *bufio.ReadWriter, status int, reason string, body []byte) {
	now := time.Now().UTC().Format(http.TimeFormat)
	var b strings.Builder
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + reason + "\r\n")
	b.WriteString("Date: " + now + "\r\nServer: pve-api-daemon/3.0\r\n")
	b.WriteString("Cache-Control: max-age=0\r\nPragma: no-cache\r\nExpires: " + now + "\r\n")
	if len(body) > 0 {
		b.WriteString("Content-Type: application/json;charset=UTF-8\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n")
	_, _ = rw.WriteString(b.String())
	_, _ = rw.Write(body)
	_ = rw.Flush()
}

func sanitizeReason(msg string) string {
	msg = strings.TrimRight(msg, "\n")
	msg = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' || r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	return msg
}

// ---------------------------------------------------------------------------
// TLS

// makeCertificates creates a CA and a server certificate signed by it.
func makeCertificates(host string) ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("proxmoxsim: CA key: %w", err)
	}
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
		return n
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Proxmox Virtual Environment (simulated)", Organization: []string{"PVE Cluster Manager CA"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("proxmoxsim: CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("proxmoxsim: server key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "pve1.sim", Organization: []string{"PVE Cluster Node"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(2 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "pve1.sim"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
	if host != "" {
		if ip := net.ParseIP(host); ip != nil {
			if !ip.IsUnspecified() {
				leaf.IPAddresses = append(leaf.IPAddresses, ip)
			}
		} else if host != "localhost" {
			leaf.DNSNames = append(leaf.DNSNames, host)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("proxmoxsim: server certificate: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	cert := tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key}
	return caPEM, cert, nil
}
