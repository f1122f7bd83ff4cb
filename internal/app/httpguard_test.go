package app

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/httpapi"
)

// guardedListener is the worker's handler with a token, a writable monitor and the real
// enqueue endpoint, on miniredis.
func guardedListener(t *testing.T) (*httptest.Server, string) {
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
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "s3cret", Redis: rdb, RedisConnOpt: connOpt, MonitorWritable: true,
		Metrics: NewMetrics(nil), Enqueue: httpapi.EnqueueHandler(client)})
	t.Cleanup(closeMon)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts, mr.Addr()
}

const goodPayload = `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"c1"}}`

// TestHTTPRefusesCrossOriginWrites: on /enqueue and on the writable monitor's API, a
// state-changing request from another site's page is 403; from the same origin, or from a
// client that is not a browser (no Origin, no Sec-Fetch-Site), it goes through.
func TestHTTPRefusesCrossOriginWrites(t *testing.T) {
	ts, _ := guardedListener(t)
	c := ts.Client()
	host := strings.TrimPrefix(ts.URL, "http://")
	// The queue must exist for the monitor to pause it.
	do := func(method, path, ctype, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.SetBasicAuth("admin", "s3cret") // a browser that has logged in sends this by itself
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
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
	if code, body := do("POST", "/enqueue", "application/json", goodPayload, nil); code != http.StatusAccepted {
		t.Fatalf("setup enqueue: %d %s", code, body)
	}
	type call struct{ method, path, ctype, body string }
	calls := []call{
		{"POST", "/enqueue", "application/json", goodPayload},
		{"POST", "/enqueue", "text/plain", goodPayload}, // what a cross-site form or fetch can send without preflight
		{"POST", "/monitor/api/queues/q:pause", "", ""},
		{"POST", "/monitor/api/queues/q:resume", "", ""},
		{"DELETE", "/monitor/api/queues/q/pending_tasks:delete_all", "", ""},
	}
	refused := []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		{"Sec-Fetch-Site": "same-site", "Origin": "http://other." + host},
		{"Origin": "https://evil.example"}, // a browser without Sec-Fetch-Site
		{"Origin": "null"},                 // a sandboxed frame
	}
	for _, cl := range calls {
		for _, hdr := range refused {
			if code, body := do(cl.method, cl.path, cl.ctype, cl.body, hdr); code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
				t.Errorf("%s %s with %v: %d %q, want 403", cl.method, cl.path, hdr, code, body)
			}
		}
	}
	allowed := []map[string]string{
		nil, // curl, an integration
		{"Sec-Fetch-Site": "same-origin", "Origin": ts.URL},
		{"Sec-Fetch-Site": "none"},
		{"Origin": ts.URL}, // same origin, a browser without Sec-Fetch-Site
	}
	for _, hdr := range allowed {
		if code, body := do("POST", "/enqueue", "application/json", goodPayload, hdr); code != http.StatusAccepted {
			t.Errorf("POST /enqueue with %v: %d %s, want 202", hdr, code, body)
		}
		if code, body := do("POST", "/enqueue", "text/plain", goodPayload, hdr); code != http.StatusUnsupportedMediaType || !strings.Contains(body, "application/json") {
			t.Errorf("POST /enqueue text/plain with %v: %d %s, want 415 naming application/json", hdr, code, body)
		}
		for _, p := range []string{"/monitor/api/queues/q:pause", "/monitor/api/queues/q:resume"} {
			if code, body := do("POST", p, "", "", hdr); code != http.StatusNoContent && code != http.StatusOK {
				t.Errorf("POST %s with %v: %d %s, want 2xx", p, hdr, code, body)
			}
		}
		if code, body := do("DELETE", "/monitor/api/queues/q/pending_tasks:delete_all", "", "", hdr); code != http.StatusOK && code != http.StatusNoContent {
			t.Errorf("DELETE delete_all with %v: %d %s, want 2xx", hdr, code, body)
		}
	}
	// Reads stay open to a cross-site navigation (they change nothing; auth still applies).
	if code, _ := do("GET", "/monitor/api/queues", "", "", map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusOK {
		t.Errorf("GET /monitor/api/queues cross-site: %d", code)
	}
}

// TestHTTPTokenCookie: ?token= is taken only at the monitor's entry; the cookie it sets holds
// no token, is HttpOnly, SameSite=Strict, scoped to the monitor, Secure behind a TLS proxy,
// and opens only the monitor.
func TestHTTPTokenCookie(t *testing.T) {
	ts, _ := guardedListener(t)
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	send := func(method, path string, hdr map[string]string, cookie *http.Cookie) *http.Response {
		t.Helper()
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader(goodPayload)
		}
		req, _ := http.NewRequest(method, ts.URL+path, body)
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	sessionOf := func(resp *http.Response) *http.Cookie {
		for _, ck := range resp.Cookies() {
			if ck.Name == tokenCookie {
				return ck
			}
		}
		return nil
	}
	resp := send("GET", "/monitor/?token=s3cret", nil, nil)
	ck := sessionOf(resp)
	if resp.StatusCode != http.StatusFound || ck == nil {
		t.Fatalf("/monitor/?token= answered %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if loc := resp.Header.Get("Location"); strings.Contains(loc, "s3cret") {
		t.Errorf("redirect keeps the token: %q", loc)
	}
	if strings.Contains(ck.Value, "s3cret") || ck.Value == "" {
		t.Errorf("cookie holds the token: %q", ck.Value)
	}
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/monitor/" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, not Secure over plain HTTP, Path=/monitor/", ck)
	}
	if r := send("GET", "/monitor/api/queues", nil, ck); r.StatusCode != http.StatusOK {
		t.Errorf("monitor with the cookie: %d", r.StatusCode)
	}
	for _, p := range []string{"/metrics"} {
		if r := send("GET", p, nil, ck); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with the monitor's cookie: %d, want 401", p, r.StatusCode)
		}
	}
	if r := send("POST", "/enqueue", nil, ck); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /enqueue with the monitor's cookie: %d, want 401", r.StatusCode)
	}
	// A forged or old-style cookie (the raw token) is refused.
	for _, v := range []string{"s3cret", ck.Value + "0", "99999999999." + strings.Repeat("0", 64)} {
		if r := send("GET", "/monitor/api/queues", nil, &http.Cookie{Name: tokenCookie, Value: v}); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("cookie %q: %d, want 401", v, r.StatusCode)
		}
	}
	// ?token= anywhere but the monitor's entry is refused (and sets no cookie).
	for _, p := range []string{"/metrics?token=s3cret", "/monitor/api/queues?token=s3cret"} {
		if r := send("GET", p, nil, nil); r.StatusCode != http.StatusUnauthorized || sessionOf(r) != nil {
			t.Errorf("GET %s: %d (cookie %v), want 401 and no cookie", p, r.StatusCode, sessionOf(r))
		}
	}
	if r := send("POST", "/enqueue?token=s3cret", nil, nil); r.StatusCode != http.StatusUnauthorized || sessionOf(r) != nil {
		t.Errorf("POST /enqueue?token=: %d, want 401", r.StatusCode)
	}
	// /monitor?token= is the entry too: the redirect keeps the query for the entry.
	if r := send("GET", "/monitor?token=s3cret", nil, nil); r.StatusCode != http.StatusMovedPermanently || r.Header.Get("Location") != "/monitor/?token=s3cret" {
		t.Errorf("/monitor?token=: %d → %q", r.StatusCode, r.Header.Get("Location"))
	}
	// Behind a TLS-terminating proxy the cookie is Secure.
	if ck := sessionOf(send("GET", "/monitor/?token=s3cret", map[string]string{"X-Forwarded-Proto": "https"}, nil)); ck == nil || !ck.Secure {
		t.Errorf("behind X-Forwarded-Proto: https the cookie is %+v, want Secure", ck)
	}
}

func TestSessionCookieExpires(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	a := newTokenAuth("s3cret")
	a.now = func() time.Time { return now }
	v := a.session()
	if !a.validSession(v) {
		t.Fatal("fresh session refused")
	}
	if newTokenAuth("other").validSession(v) {
		t.Fatal("a session made under another token is accepted")
	}
	now = now.Add(sessionTTL + time.Second)
	if a.validSession(v) {
		t.Fatal("expired session accepted")
	}
}

// listenerFromConfig serves h as the worker does, with the listener settings of env.
func listenerFromConfig(t *testing.T, env map[string]string, h http.Handler) string {
	t.Helper()
	cfg, err := ParseWorkerSettings(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(h, HTTPServerOptions{IdleTimeout: cfg.HTTPIdleTimeout, BodyTimeout: cfg.HTTPBodyTimeout})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// TestHTTPIdleConnectionClosed: a keep-alive connection that sends nothing after its request
// is closed after LETTAQ_HTTP_IDLE_TIMEOUT.
func TestHTTPIdleConnectionClosed(t *testing.T) {
	h, closeMon := NewHTTPHandler(HTTPOptions{})
	defer closeMon()
	addr := listenerFromConfig(t, map[string]string{"LETTAQ_HTTP_IDLE_TIMEOUT": "300ms"}, h)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t0 := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // the test's own bound
	_, err = br.ReadByte()
	waited := time.Since(t0)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the idle connection was still open after %v", waited)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmtErr(err), "reset") {
		t.Fatalf("read after idle: %v", err)
	}
	if waited < 250*time.Millisecond || waited > 5*time.Second {
		t.Errorf("closed after %v, want about 300ms", waited)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestHTTPTricklingBodyCut: an authenticated request whose body trickles in at 1 byte a second
// is cut at LETTAQ_HTTP_BODY_TIMEOUT: the handler's read fails, and the connection ends.
func TestHTTPTricklingBodyCut(t *testing.T) {
	readErr := make(chan error, 1)
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "s3cret", Enqueue: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})})
	defer closeMon()
	addr := listenerFromConfig(t, map[string]string{"LETTAQ_HTTP_BODY_TIMEOUT": "1500ms"}, h)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /enqueue HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // 1 byte a second, while the server takes it
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if _, err := conn.Write([]byte("{")); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	select {
	case err := <-readErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the handler's body read ended with %v, want a timeout", err)
		}
		if took := time.Since(t0); took < time.Second || took > 6*time.Second {
			t.Errorf("cut after %v, want about 1.5s", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("a body trickling at 1 byte/s was still being read after 20s")
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the connection stayed open after the body timed out")
		}
	}
}

// TestHTTPBodyDeadlineDoesNotCutAnswers: once the body is in, a handler may take longer than
// the body timeout (its context is not cancelled, its answer arrives).
func TestHTTPBodyDeadlineDoesNotCutAnswers(t *testing.T) {
	release := make(chan struct{})
	ctxErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-release:
			ctxErr <- r.Context().Err()
			_, _ = io.WriteString(w, "done")
		case <-r.Context().Done():
			ctxErr <- r.Context().Err()
		}
	})
	addr := listenerFromConfig(t, map[string]string{"LETTAQ_HTTP_BODY_TIMEOUT": "200ms"}, h)
	done := make(chan string, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader("{}"))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	// Well past the body timeout: the request's context must still be alive.
	timer := time.NewTimer(800 * time.Millisecond)
	select {
	case err := <-ctxErr:
		t.Fatalf("the request's context ended before the handler answered: %v", err)
	case <-timer.C:
	}
	close(release)
	if err := <-ctxErr; err != nil {
		t.Fatalf("context: %v", err)
	}
	if got := <-done; got != "done" {
		t.Fatalf("answer %q", got)
	}
}
