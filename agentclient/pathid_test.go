package agentclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// An id goes into a request's path escaped once, by the URL, in both
// transports; an id Letta's patterns refuse (a '/', a space, '%', a dot
// segment) is refused before any request, with an error naming the field,
// that Classify calls permanent.
func TestPathIDsEscapedOnceAndChecked(t *testing.T) {
	leakCheck(t)
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/stream") {
			startSSE(w)
			sse(w, data(fxAssistant), data(fxStop), data("[DONE]"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"x"}`))
	}))
	t.Cleanup(srv.Close)
	taken := func() []string {
		mu.Lock()
		defer mu.Unlock()
		p := paths
		paths = nil
		return p
	}
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		c := newClient(t, tr, srv.URL+"/le tta", Clocks{})
		ctx := context.Background()
		const good = "agent-3f1c2b7e-8d4a-4f2e-9c1d-5b6a7e8f9a0b"
		req := sendReq()
		req.AgentID = good
		if err := c.SendStream(ctx, req, NewStreamState(), StreamOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetAgent(ctx, good); err != nil {
			t.Fatal(err)
		}
		want := []string{"/le%20tta/v1/agents/" + good + "/messages/stream", "/le%20tta/v1/agents/" + good}
		if got := taken(); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("paths sent %q, want %q", got, want)
		}
		for _, bad := range []string{"agent 1/x", "..", ".", "agent-1/../../v1/admin", "agent%2F1", "agent-1?x=1", "agent-1#f", "ag\u00e9nt", strings.Repeat("a", 200)} {
			calls := map[string]func() error{
				"SendStream": func() error {
					r := sendReq()
					r.AgentID = bad
					return c.SendStream(ctx, r, NewStreamState(), StreamOptions{})
				},
				"ResumeStream": func() error {
					return c.ResumeStream(ctx, ResumeRequest{RunID: bad}, NewStreamState(), StreamOptions{})
				},
				"GetAgent":          func() error { _, err := c.GetAgent(ctx, bad); return err },
				"ListAgentMessages": func() error { _, err := c.ListAgentMessages(ctx, bad, ListOptions{}); return err },
				"CancelRuns":        func() error { _, err := c.CancelRuns(ctx, bad, nil); return err },
				"SendAsync": func() error {
					r := sendReq()
					r.AgentID = bad
					_, err := c.SendAsync(ctx, r)
					return err
				},
				"GetRun":          func() error { _, err := c.GetRun(ctx, bad); return err },
				"ListRunMessages": func() error { _, err := c.ListRunMessages(ctx, bad, ListOptions{}); return err },
			}
			for name, call := range calls {
				err := call()
				var ie *InvalidIDError
				field := "agent_id"
				if strings.Contains(name, "Run") && name != "CancelRuns" || name == "ResumeStream" {
					field = "run_id"
				}
				if !errors.As(err, &ie) || ie.Field != field || !strings.Contains(err.Error(), field) {
					t.Errorf("%s(%q) = %v, want an *InvalidIDError naming %s", name, bad, err, field)
				}
				if Classify(err) != Permanent {
					t.Errorf("%s(%q): Classify = %v, want permanent", name, bad, Classify(err))
				}
			}
			if got := taken(); len(got) > 0 {
				t.Errorf("id %q: requests were sent: %q", bad, got)
			}
		}
	})
}
