package app

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
)

// The chat page is behind the listener's token, as the monitor is: Bearer or basic auth, or
// ?token= once at /chat/ (a cookie for /chat/ only, the token dropped from the address);
// another site's page cannot post to it.
func TestChatPageAuth(t *testing.T) {
	chat := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("chat " + r.URL.Path)) })
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "s3cret", Chat: chat, Metrics: NewMetrics(nil)})
	defer closeMon()
	ts := httptest.NewServer(h)
	defer ts.Close()
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	do := func(method, path string, hdr map[string]string, ck *http.Cookie) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader("{}"))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp, b.String()
	}
	if r, _ := do("GET", "/chat/", nil, nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("/chat/ without the token = %d", r.StatusCode)
	}
	if r, body := do("GET", "/chat/events", map[string]string{"Authorization": "Bearer s3cret"}, nil); r.StatusCode != 200 || body != "chat /events" {
		t.Errorf("/chat/events with the token = %d %q (the page's handler sees paths below /chat)", r.StatusCode, body)
	}
	r, _ := do("GET", "/chat/?token=s3cret", nil, nil)
	var cookie *http.Cookie
	for _, ck := range r.Cookies() {
		if ck.Name == tokenCookie {
			cookie = ck
		}
	}
	if r.StatusCode != http.StatusFound || strings.Contains(r.Header.Get("Location"), "s3cret") || cookie == nil || cookie.Path != "/chat/" || !cookie.HttpOnly {
		t.Fatalf("/chat/?token= = %d Location %q cookie %+v", r.StatusCode, r.Header.Get("Location"), cookie)
	}
	if r, _ := do("GET", "/chat/events?chat=x", nil, cookie); r.StatusCode != 200 {
		t.Errorf("/chat/events with the cookie = %d", r.StatusCode)
	}
	if r, _ := do("GET", "/metrics", nil, cookie); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("the chat's cookie opened /metrics")
	}
	if r, _ := do("GET", "/chat", nil, nil); r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/chat/" {
		t.Errorf("/chat = %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	cross := map[string]string{"Authorization": "Bearer s3cret", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
	if r, _ := do("POST", "/chat/send", cross, nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site POST /chat/send = %d, want 403", r.StatusCode)
	}
}

// The relay serves the web chat page behind its token when LETTAQ_RELAY_WEB_AGENTS is set:
// a message goes in as a turn with the task timeout of the budget variables (the workers'),
// and comes out on the page's event stream with what the user said.
func TestRelayServesTheWebChat(t *testing.T) {
	mr := miniredis.RunT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := map[string]string{"REDIS_URL": "redis://" + mr.Addr() + "/0", "LETTAQ_HTTP_ADDR": addr, "LETTAQ_HTTP_TOKEN": "s3cret",
		"LETTAQ_RELAY_WEB_AGENTS": "demo=" + agentIDForTest, "LETTAQ_STREAM_TOTAL": "100s", "LETTAQ_RELAY_WEB_JOURNAL_URL": "https://worker.example/turns/"}
	cfg, err := ParseRelaySettings(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runRelay(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	base := "http://" + addr
	req := func(method, path, body string, token bool) *http.Response {
		t.Helper()
		for i := 0; ; i++ {
			r, _ := http.NewRequest(method, base+path, strings.NewReader(body))
			if token {
				r.Header.Set("Authorization", "Bearer s3cret")
			}
			if body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(r)
			if err == nil {
				return resp
			}
			if i > 100 {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // the relay is starting
		}
	}
	if resp := req("GET", "/chat/", "", false); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/chat/ without the token = %d", resp.StatusCode)
	}
	resp := req("GET", "/chat/config", "", true)
	var conf struct {
		Agents     []struct{ Name, ID string }
		JournalURL string `json:"journal_url"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&conf)
	resp.Body.Close()
	if len(conf.Agents) != 1 || conf.Agents[0].Name != "demo" || conf.JournalURL != "https://worker.example/turns/" {
		t.Errorf("config %+v", conf)
	}
	resp = req("POST", "/chat/send", `{"chat":"c1","agent":"demo","message_id":"m1","text":"hi"}`, true)
	var res struct {
		TaskID string `json:"task_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || res.TaskID == "" {
		t.Fatalf("send = %d %+v", resp.StatusCode, res)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: mr.Addr()})
	defer insp.Close()
	info, err := insp.GetTaskInfo("lettaq", res.TaskID)
	if err != nil || info.Timeout != cfg.Budget.TaskTimeout() {
		t.Errorf("task %v (err %v): timeout want %v", info, err, cfg.Budget.TaskTimeout())
	}
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	r, _ := http.NewRequestWithContext(ectx, "GET", base+"/chat/events?chat=c1", nil)
	r.Header.Set("Authorization", "Bearer s3cret")
	eresp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer eresp.Body.Close()
	sc := bufio.NewScanner(eresp.Body)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if !strings.Contains(line, `"type":"accepted"`) || !strings.Contains(line, `"said":{"text":"hi"}`) {
				t.Errorf("first event %s", line)
			}
			break
		}
	}
}

const agentIDForTest = "agent-11111111-2222-4333-8444-555555555555"
