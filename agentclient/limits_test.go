package agentclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestSSEEventBound: an event made of lines each under the line limit is
// refused once its data lines joined pass the event limit; an event of
// exactly the limit is read.
func TestSSEEventBound(t *testing.T) {
	line := "data: " + strings.Repeat("a", 99) + "\n" // 99 bytes of data
	// 10 lines: 10*99 + 9 newlines = 999 bytes of data.
	in := strings.Repeat(line, 10) + "\n"
	rd := newSSEReader(strings.NewReader(in), 200, 999, nil)
	fr, err := rd.Next()
	if err != nil || len(fr.Data) != 999 {
		t.Fatalf("event at the limit: %d bytes, err %v", len(fr.Data), err)
	}
	rd = newSSEReader(strings.NewReader(in), 200, 998, nil)
	_, err = rd.Next()
	var pe *ProtocolError
	if !errors.Is(err, ErrEventTooLong) || !errors.As(err, &pe) || pe.Limit != 998 || pe.LimitName != "MaxEventBytes" {
		t.Fatalf("event over the limit: err = %v", err)
	}
	if cap(rd.data) > 998 {
		t.Errorf("event buffer grew to %d bytes, past the 998-byte limit", cap(rd.data))
	}
}

// TestResponseBodyBound: a JSON answer over MaxResponseBytes is a permanent
// *ProtocolError naming the limit; one under it decodes.
func TestResponseBodyBound(t *testing.T) {
	pad := strings.Repeat("p", 2000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"run-1","status":"running","pad":"` + pad + `"}`))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		limit int
		ok    bool
	}{{4096, true}, {1024, false}} {
		c, err := New(Config{BaseURL: srv.URL, MaxResponseBytes: tc.limit})
		if err != nil {
			t.Fatal(err)
		}
		run, err := c.GetRun(context.Background(), "run-1")
		if tc.ok {
			if err != nil || run.ID != "run-1" {
				t.Fatalf("limit %d: run %+v, err %v", tc.limit, run, err)
			}
			continue
		}
		var pe *ProtocolError
		if !errors.As(err, &pe) || !errors.Is(err, ErrResponseTooLarge) || Classify(err) != Permanent {
			t.Fatalf("limit %d: err %T %v, want a permanent response-too-large *ProtocolError", tc.limit, err, err)
		}
		for _, w := range []string{"get run", "/v1/runs/run-1", "response body too large", "limit 1024 bytes", "MaxResponseBytes"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
	}
}

// TestTranscriptBound: a state stops taking text past its limit and says
// so; complete messages that replace text do not count twice.
func TestTranscriptBound(t *testing.T) {
	st := NewStreamState()
	st.SetTranscriptLimit(100)
	now := time.Now()
	msg := func(text string) Message {
		return &AssistantMessage{Common: Common{MessageType: TypeAssistant, ID: "m1"}, Content: Content{Text: text}}
	}
	for i := 0; i < 5; i++ {
		st.Apply(msg(strings.Repeat("r", 90)), true, now) // replaces: stays 90 bytes
	}
	if st.LimitErr() != nil {
		t.Fatalf("replacing text counted as growth: %v", st.LimitErr())
	}
	st.Apply(msg("0123456789"), false, now) // 100 bytes: at the limit
	if st.LimitErr() != nil {
		t.Fatalf("at the limit: %v", st.LimitErr())
	}
	st.Apply(msg("!"), false, now)
	pe := st.LimitErr()
	if pe == nil || !errors.Is(pe, ErrTranscriptTooLarge) || pe.Limit != 100 || pe.LimitName != "MaxTranscriptBytes" {
		t.Fatalf("past the limit: %v", pe)
	}
	if u := st.Apply(msg(strings.Repeat("x", 1000)), false, now); u.Step != -1 || len(st.Answer()) > 101 {
		t.Fatalf("text taken after the limit: update %+v, answer %d bytes", u, len(st.Answer()))
	}
}

// TestRedirectsNeverCarryTheKey: Letta's answers are never followed to
// another origin (here another port of the same host, where net/http would
// keep the Authorization header), with the default client or a caller's
// own; the error names the target.
func TestRedirectsNeverCarryTheKey(t *testing.T) {
	const key = "sk-redirect-secret"
	var other atomic.Int32
	var sawKey atomic.Bool
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), key) {
			sawKey.Store(true)
		}
		_, _ = w.Write([]byte(`{"id":"run-1","status":"completed"}`))
	}))
	defer b.Close()
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, b.URL+r.URL.Path, http.StatusFound)
	}))
	defer a.Close()
	for name, hc := range map[string]*http.Client{"default": nil, "caller's": {}, "caller's with CheckRedirect": {
		CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}} {
		c, err := New(Config{BaseURL: a.URL, APIKey: key, HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetRun(context.Background(), "run-1")
		if err == nil || !strings.Contains(err.Error(), "redirected to "+b.URL) || Classify(err) != Permanent {
			t.Errorf("%s client: err %v, want a permanent error naming the redirect target", name, err)
		}
		if strings.Contains(err.Error(), key) {
			t.Errorf("%s client: error carries the key", name)
		}
	}
	if other.Load() != 0 || sawKey.Load() {
		t.Fatalf("the other origin got %d requests (key seen: %v)", other.Load(), sawKey.Load())
	}
}

// TestNewHidesBaseURLPassword: a base URL whose password does not parse
// ('/', '?', '#', a stray '%') is refused without any part of it.
func TestNewHidesBaseURLPassword(t *testing.T) {
	for _, pw := range []string{"Zm9vQk/YmFyQk", "SeKrEtQ?HuNtEr", "SeKrEtW#HuNtEr", "SeKrEtE%zzHuNtEr", "SeKrEtT%HuNtEr"} {
		_, err := New(Config{BaseURL: "http://user:" + pw + "@letta:8283"})
		if err == nil {
			t.Errorf("password %q: accepted", pw)
			continue
		}
		for _, part := range []string{"Zm9vQk", "YmFyQk", "SeKrEt", "HuNtEr"} {
			if strings.Contains(pw, part) && strings.Contains(err.Error(), part) {
				t.Errorf("password %q: the error shows %q: %v", pw, part, err)
			}
		}
	}
}
