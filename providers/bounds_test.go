package providers_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hyperfleet/hyperfleet/providers"
)

// A body longer than the limit fails its read with ErrResponseTooLarge; one
// exactly at the limit reads whole.
func TestBoundedTransportLimitsBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := 100
		if r.URL.Path == "/long" {
			n = 101
		}
		_, _ = w.Write([]byte(strings.Repeat("x", n)))
	}))
	defer srv.Close()
	hc := &http.Client{Transport: &providers.BoundedTransport{Base: http.DefaultTransport, MaxBody: 100}}

	read := func(path string) ([]byte, error) {
		res, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		return io.ReadAll(res.Body)
	}
	if body, err := read("/exact"); err != nil || len(body) != 100 {
		t.Fatalf("a body at the limit: %d bytes, %v", len(body), err)
	}
	body, err := read("/long")
	if !errors.Is(err, providers.ErrResponseTooLarge) {
		t.Fatalf("a body past the limit read without ErrResponseTooLarge: %d bytes, %v", len(body), err)
	}
	if len(body) > 100 {
		t.Errorf("%d bytes handed out past the limit of 100", len(body))
	}
	if !strings.Contains(err.Error(), "/long sent more than 100 bytes") {
		t.Errorf("the error does not say which response was too large: %v", err)
	}
}

// An endpoint that accepts the connection and never answers fails the
// request at the response-header timeout, with an error that is a net.Error
// timeout and says the host timed out.
func TestBoundedTransportNamesAHungEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			held <- c // held open, never answered
		}
	}()
	defer func() {
		select {
		case c := <-held:
			_ = c.Close()
		default:
		}
	}()
	hc := &http.Client{Transport: &providers.BoundedTransport{
		Base: &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond}, MaxBody: 100,
	}}
	resp, err := hc.Get("http://" + ln.Addr().String() + "/version")
	if err == nil {
		_ = resp.Body.Close()
	}
	var te *providers.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("a hung endpoint gave %v, not a TimeoutError", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("the error is not a net.Error timeout: %v", err)
	}
	if !strings.Contains(err.Error(), ln.Addr().String()+" timed out") {
		t.Errorf("the error does not name the host that timed out: %v", err)
	}
}
