package app

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/httpapi"
)

// hostListener is the worker's handler (enqueue, writable monitor, budget, metrics) on
// miniredis, with token ("" for none).
func hostListener(t *testing.T, token string) *httptest.Server {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	connOpt := asynq.RedisClientOpt{Addr: mr.Addr()}
	client, err := queue.NewClient(queue.ClientConfig{Redis: connOpt, Queue: "q", Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cfg, err := ParseWorkerSettings(nil, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	info := NewBudgetInfo(cfg)
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: token, Redis: rdb, RedisConnOpt: connOpt, MonitorWritable: true,
		Metrics: NewMetrics(nil), Enqueue: httpapi.EnqueueHandler(client), Budget: &info})
	t.Cleanup(closeMon)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

// TestHTTPWithoutTokenServesOnlyLoopbackHosts: DNS rebinding. Without a token, a page of
// rebind.attacker.example whose name now resolves to 127.0.0.1 sends its requests with that
// Host (and Origin and Sec-Fetch-Site: same-origin of it): every path but /healthz and
// /readyz refuses them (403); requests addressed to 127.0.0.1, localhost or [::1] (with or
// without the port) are served. With a token, any Host is served to whoever has the token.
func TestHTTPWithoutTokenServesOnlyLoopbackHosts(t *testing.T) {
	open := hostListener(t, "")
	port := open.URL[strings.LastIndexByte(open.URL, ':'):]
	do := func(ts *httptest.Server, host, method, path, body, token string) int {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	paths := []struct{ method, path, body string }{
		{"POST", "/enqueue", goodPayload},
		{"GET", "/monitor/api/queues", ""},
		{"GET", "/monitor/", ""},
		{"GET", "/budget", ""},
		{"GET", "/metrics", ""},
		{"GET", "/", ""},
	}
	for _, host := range []string{"rebind.attacker.example" + port, "rebind.attacker.example", "localhost.attacker.example" + port,
		"127.0.0.1.nip.io" + port, "attacker.example:80@127.0.0.1", "0.0.0.0" + port, "[::ffff:7f00:1]x"} {
		for _, p := range paths {
			if code := do(open, host, p.method, p.path, p.body, ""); code != http.StatusForbidden {
				t.Errorf("no token, Host %q: %s %s answers %d, want 403", host, p.method, p.path, code)
			}
		}
	}
	for _, host := range []string{"127.0.0.1" + port, "127.0.0.1", "localhost" + port, "LocalHost" + port, "localhost", "[::1]" + port, "[::1]"} {
		for _, p := range paths {
			want := http.StatusOK
			if p.method == "POST" {
				want = http.StatusAccepted
			}
			if code := do(open, host, p.method, p.path, p.body, ""); code != want {
				t.Errorf("no token, Host %q: %s %s answers %d, want %d", host, p.method, p.path, code, want)
			}
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code := do(open, "rebind.attacker.example"+port, "GET", p, "", ""); code == http.StatusForbidden {
			t.Errorf("no token, another Host: GET %s answers 403, want it served (no data)", p)
		}
	}
	guarded := hostListener(t, "s3cret")
	for _, p := range paths {
		want := http.StatusOK
		if p.method == "POST" {
			want = http.StatusAccepted
		}
		if code := do(guarded, "lettaq.example.com", p.method, p.path, p.body, "s3cret"); code != want {
			t.Errorf("token, Host lettaq.example.com: %s %s answers %d, want %d", p.method, p.path, code, want)
		}
	}
}
