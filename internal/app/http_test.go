package app

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHTTPHealthReadyAndAuth(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	connOpt := asynq.RedisClientOpt{Addr: mr.Addr()}
	probe := newRedisProbe(rdb, nil, 20*time.Millisecond, time.Second, nil)
	defer probe.Close()
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "s3cret", Redis: rdb, RedisConnOpt: connOpt, probe: probe,
		Metrics: NewMetrics(asynq.NewInspectorFromRedisClient(rdb)),
		Enqueue: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(202) }),
		Notify:  http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(202) })})
	defer closeMon()
	ts := httptest.NewServer(h)
	defer ts.Close()
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	if code, body := get(t, c, ts.URL+"/healthz", nil); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, c, ts.URL+"/readyz", nil); code != 200 || body != `{"status":"ready"}`+"\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	if code, body := get(t, c, ts.URL+"/readyz?verbose=1", map[string]string{"Authorization": "Bearer s3cret"}); code != 200 || !strings.Contains(body, `"redis":"ok"`) {
		t.Errorf("/readyz?verbose=1 = %d %q", code, body)
	}
	for _, p := range []string{"/metrics", "/monitor/", "/monitor/api/queues", "/enqueue", "/notify"} {
		if code, _ := get(t, c, ts.URL+p, nil); code != http.StatusUnauthorized {
			t.Errorf("%s without token = %d, want 401", p, code)
		}
		if code, _ := get(t, c, ts.URL+p, map[string]string{"Authorization": "Bearer wrong"}); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token = %d, want 401", p, code)
		}
	}
	code, body := get(t, c, ts.URL+"/metrics", map[string]string{"Authorization": "Bearer s3cret"})
	if code != 200 || !strings.Contains(body, "lettaq_turns_total") && !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics with token = %d", code)
	}
	if !strings.Contains(body, "lettaq_queue_scrape_errors 0") {
		t.Errorf("/metrics lacks the queue collector:\n%s", body)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/monitor/api/queues", nil)
	req.SetBasicAuth("admin", "s3cret")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("monitor with basic auth: %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	// ?token= sets a cookie and drops the token from the address.
	resp, err := c.Get(ts.URL + "/monitor/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || strings.Contains(resp.Header.Get("Location"), "s3cret") {
		t.Errorf("?token= answered %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == tokenCookie {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly {
		t.Fatalf("no HttpOnly token cookie: %v", resp.Cookies())
	}
	req, _ = http.NewRequest("GET", ts.URL+"/monitor/api/queues", nil)
	req.AddCookie(cookie)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("monitor with cookie: %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}

	// Redis down: not ready, still healthy.
	mr.Close()
	<-probe.Next() // the PING in flight may have started before the close
	<-probe.Next()
	if code, body := get(t, c, ts.URL+"/readyz", nil); code != http.StatusServiceUnavailable || body != `{"status":"not ready"}`+"\n" {
		t.Errorf("/readyz with Redis down = %d %q", code, body)
	}
	if code, _ := get(t, c, ts.URL+"/healthz", nil); code != 200 {
		t.Errorf("/healthz with Redis down = %d", code)
	}
}

func TestHTTPNoTokenOnLoopbackIsOpen(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	h, closeMon := NewHTTPHandler(HTTPOptions{Redis: rdb, Metrics: NewMetrics(nil)})
	defer closeMon()
	ts := httptest.NewServer(h)
	defer ts.Close()
	if code, _ := get(t, ts.Client(), ts.URL+"/metrics", nil); code != 200 {
		t.Errorf("/metrics = %d", code)
	}
}

func TestWorkerRefusesNonLoopbackWithoutToken(t *testing.T) {
	var out, errOut strings.Builder
	code := RunWorker(context.Background(), []string{"--http-addr=0.0.0.0:0"}, env(nil), &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "LETTAQ_HTTP_TOKEN") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// TestBearerSchemeCaseInsensitive: the auth scheme is case-insensitive (RFC 9110 11.1):
// "bearer", "BEARER" and extra spaces before the token are the Bearer scheme; a wrong token,
// another scheme, or "Bearer" with nothing after it are not.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	h := requireToken("s3cret")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for hdr, want := range map[string]int{
		"Bearer s3cret":   http.StatusOK,
		"bearer s3cret":   http.StatusOK,
		"BEARER s3cret":   http.StatusOK,
		"Bearer  s3cret":  http.StatusOK,
		"bearer wrong":    http.StatusUnauthorized,
		"Bearers3cret":    http.StatusUnauthorized,
		"Token s3cret":    http.StatusUnauthorized,
		"Bearer ":         http.StatusUnauthorized,
		"Bearer s3cret x": http.StatusUnauthorized,
	} {
		rr := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Authorization", hdr)
		h.ServeHTTP(rr, req)
		if rr.Code != want {
			t.Errorf("Authorization: %q answers %d, want %d", hdr, rr.Code, want)
		}
	}
}
