package agentclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// okScript is a whole turn, chunked.
func okScript(tlsOn bool) *script {
	return &script{tls: tlsOn, steps: []scriptStep{w(sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunkBody(turnBody(), 40, ""))}}
}

// A caller's TLS dialer (certificate pinning, a custom handshake) is used
// for streams by both transports: the dedicated transport does not
// implement it, so such a client streams through net/http.
func TestTransportsAgreeOnDialTLS(t *testing.T) {
	leakCheck(t)
	sc := okScript(true)
	errPinned := errors.New("certificate not pinned")
	var calls atomic.Int32
	sc.tune = func(tr *http.Transport) {
		tr.DialTLSContext = func(context.Context, string, string) (net.Conn, error) {
			calls.Add(1)
			return nil, errPinned
		}
	}
	url := serveScript(t, sc, nil)
	var runs [2]run
	for i, mode := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
		calls.Store(0)
		runs[i] = runScript(scriptClient(t, sc, url, mode, nil), sc)
		if calls.Load() != 1 {
			t.Errorf("%s: the refusing TLS dialer was called %d times, want 1", mode, calls.Load())
		}
	}
	compareRuns(t, runs[0], runs[1], true)
	if runs[0].conclusion != "transport" {
		t.Errorf("with a refusing TLS dialer the stream concluded %q, want transport", runs[0].conclusion)
	}
}

// A client's cookie Jar (sticky sessions, cookie auth) is sent with
// streams by both transports.
func TestTransportsAgreeOnCookieJar(t *testing.T) {
	leakCheck(t)
	sc := okScript(false)
	heads := make(chan *http.Request, 1)
	base := serveScript(t, sc, heads)
	for _, mode := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(base)
		jar.SetCookies(u, []*http.Cookie{{Name: "lb", Value: "node-7"}})
		r := runScript(scriptClient(t, sc, base, mode, &http.Client{Jar: jar}), sc)
		if r.conclusion != "ok" {
			t.Fatalf("%s: %s", mode, r.conclusion)
		}
		if got := (<-heads).Header.Get("Cookie"); got != "lb=node-7" {
			t.Errorf("%s: the stream request carried Cookie %q, want lb=node-7", mode, got)
		}
	}
}

// Transport settings the dedicated transport does not implement send the
// streams through net/http; those it implements keep it.
func TestDedicatedRoutesSettingsItCannotHonour(t *testing.T) {
	h1 := new(http.Protocols)
	h1.SetHTTP1(true)
	h2only := new(http.Protocols)
	h2only.SetHTTP2(true)
	h2c := new(http.Protocols)
	h2c.SetHTTP1(true)
	h2c.SetUnencryptedHTTP2(true)
	for _, tc := range []struct {
		name  string
		https bool
		tune  func(*http.Transport, *http.Client)
		want  StreamTransport
	}{
		{"defaults", false, func(*http.Transport, *http.Client) {}, StreamDedicated},
		{"MaxConnsPerHost", false, func(t *http.Transport, _ *http.Client) { t.MaxConnsPerHost = 4 }, StreamNetHTTP},
		{"ResponseHeaderTimeout", false, func(t *http.Transport, _ *http.Client) { t.ResponseHeaderTimeout = time.Second }, StreamNetHTTP},
		{"Protocols HTTP/2 only", true, func(t *http.Transport, _ *http.Client) { t.Protocols = h2only }, StreamNetHTTP},
		{"Protocols unencrypted HTTP/2", false, func(t *http.Transport, _ *http.Client) { t.Protocols = h2c }, StreamNetHTTP},
		{"Protocols HTTP/1", false, func(t *http.Transport, _ *http.Client) { t.Protocols = h1 }, StreamDedicated},
		{"DialTLSContext over https", true, func(t *http.Transport, _ *http.Client) {
			t.DialTLSContext = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("x") }
		}, StreamNetHTTP},
		{"DialTLS over https", true, func(t *http.Transport, _ *http.Client) {
			t.DialTLS = func(string, string) (net.Conn, error) { return nil, errors.New("x") }
		}, StreamNetHTTP},
		{"DialTLSContext over http (unused by net/http too)", false, func(t *http.Transport, _ *http.Client) {
			t.DialTLSContext = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("x") }
		}, StreamDedicated},
		{"HTTPClient.Timeout", false, func(_ *http.Transport, c *http.Client) { c.Timeout = time.Minute }, StreamNetHTTP},
		{"cookie Jar", false, func(_ *http.Transport, c *http.Client) { c.Jar, _ = cookiejar.New(nil) }, StreamNetHTTP},
		{"TLSHandshakeTimeout (honoured)", true, func(t *http.Transport, _ *http.Client) { t.TLSHandshakeTimeout = time.Second }, StreamDedicated},
		{"MaxResponseHeaderBytes (honoured)", false, func(t *http.Transport, _ *http.Client) { t.MaxResponseHeaderBytes = 1 << 10 }, StreamDedicated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTransport()
			hc := &http.Client{Transport: tr}
			tc.tune(tr, hc)
			base := "http://127.0.0.1:1"
			if tc.https {
				base = "https://127.0.0.1:1"
			}
			c, err := New(Config{BaseURL: base, HTTPClient: hc})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.StreamTransport(); got != tc.want {
				t.Errorf("streams over %q, want %q", got, tc.want)
			}
		})
	}
}

// The deprecated Transport.Dial, which net/http uses when DialContext is
// nil, is used by the dedicated transport too.
func TestTransportsAgreeOnDeprecatedDial(t *testing.T) {
	leakCheck(t)
	sc := okScript(false)
	var calls atomic.Int32
	sc.tune = func(tr *http.Transport) {
		tr.DialContext = nil
		tr.Dial = func(network, addr string) (net.Conn, error) { //nolint:staticcheck // the deprecated field is what is tested
			calls.Add(1)
			return net.Dial(network, addr)
		}
	}
	url := serveScript(t, sc, nil)
	for _, mode := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
		calls.Store(0)
		c := scriptClient(t, sc, url, mode, nil)
		if c.StreamTransport() != mode {
			t.Fatalf("streams over %q, want %q", c.StreamTransport(), mode)
		}
		if r := runScript(c, sc); r.conclusion != "ok" {
			t.Fatalf("%s: %s", mode, r.conclusion)
		}
		if calls.Load() != 1 {
			t.Errorf("%s: Transport.Dial called %d times, want 1", mode, calls.Load())
		}
	}
}

// Header values with control bytes (NUL, DEL, a line break) are refused
// when the client is made, naming the field: net/http would refuse every
// request carrying them, the dedicated transport would send them.
func TestNewRefusesControlBytesInHeaderValues(t *testing.T) {
	for _, tc := range []struct {
		field string
		cfg   Config
	}{
		{"APIKey", Config{APIKey: "sk-\x00abc"}},
		{"APIKey", Config{APIKey: "sk-\x7fabc"}},
		{"ProjectID", Config{ProjectID: "proj\x00"}},
		{"UserAgent", Config{UserAgent: "ua\x7f"}},
		{"UserAgent", Config{UserAgent: "ua\r\nX-Evil: 1"}},
	} {
		for _, mode := range []StreamTransport{StreamDedicated, StreamNetHTTP} {
			tc.cfg.StreamTransport = mode
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("%s: New with a control byte in %s = %v, want an error naming %s", mode, tc.field, err, tc.field)
			}
			if err != nil && strings.Contains(err.Error(), "abc") {
				t.Errorf("the error repeats the key: %v", err)
			}
		}
	}
	if _, err := New(Config{UserAgent: "lettaq/1 (tab\tok)"}); err != nil {
		t.Errorf("a tab in a header value is allowed (as net/http allows it): %v", err)
	}
}
