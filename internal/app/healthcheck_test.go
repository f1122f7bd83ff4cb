package app

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func healthcheck(t *testing.T, e map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = RunWorker(context.Background(), append([]string{"healthcheck"}, args...), env(e), &out, &errOut)
	return code, out.String(), errOut.String()
}

// The subcommand checks the worker's real /readyz: ready with Redis up, not with Redis down.
func TestHealthcheckAgainstReadyz(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	probe := newRedisProbe(rdb, nil, 20*time.Millisecond, time.Second, nil)
	defer probe.Close()
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "tok", Redis: rdb, probe: probe})
	defer closeMon()
	ts := httptest.NewServer(h)
	defer ts.Close()
	e := map[string]string{"LETTAQ_HTTP_ADDR": ts.Listener.Addr().String(), "LETTAQ_HTTP_TOKEN": "tok"}

	if code, out, errOut := healthcheck(t, e); code != HealthOK || !strings.Contains(out, `"redis":"ok"`) {
		t.Errorf("ready worker: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	mr.Close()
	<-probe.Next() // the PING in flight may have started before the close
	<-probe.Next()
	if code, _, errOut := healthcheck(t, e); code != HealthUnhealthy || !strings.Contains(errOut, "503") {
		t.Errorf("Redis down: exit %d, stderr %q; want 1 naming the 503", code, errOut)
	}
}

func TestHealthcheckStatusAndToken(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	var gotAuth atomic.Value
	gotAuth.Store("")
	var path atomic.Value
	path.Store("")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
		path.Store(r.Method + " " + r.URL.Path)
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write([]byte(`{"redis":"ok"}`))
	}))
	defer ts.Close()
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())

	// A listener on all interfaces (as in the container) is reached on loopback; the token goes
	// as a Bearer token.
	e := map[string]string{"LETTAQ_HTTP_ADDR": "0.0.0.0:" + port, "LETTAQ_HTTP_TOKEN": "s3cret"}
	if code, out, errOut := healthcheck(t, e); code != HealthOK || !strings.HasPrefix(out, "ready: ") {
		t.Errorf("200: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := gotAuth.Load(); got != "Bearer s3cret" {
		t.Errorf("Authorization = %q, want the token", got)
	}
	if got := path.Load(); got != "GET /readyz" {
		t.Errorf("request = %q", got)
	}
	if code, _, errOut := healthcheck(t, e); code != HealthOK || strings.Contains(errOut, "s3cret") {
		t.Errorf("exit %d, stderr %q (must not show the token)", code, errOut)
	}

	// No token: no Authorization header.
	if code, _, _ := healthcheck(t, map[string]string{"LETTAQ_HTTP_ADDR": ts.Listener.Addr().String()}); code != HealthOK {
		t.Errorf("without token: exit %d", code)
	}
	if got := gotAuth.Load(); got != "" {
		t.Errorf("Authorization without a token = %q", got)
	}

	// Flags override the environment.
	if code, _, _ := healthcheck(t, map[string]string{"LETTAQ_HTTP_ADDR": "127.0.0.1:1"}, "--http-addr", ts.Listener.Addr().String(), "--http-token=f"); code != HealthOK || gotAuth.Load() != "Bearer f" {
		t.Errorf("flags: exit %d, Authorization %q", code, gotAuth.Load())
	}

	status.Store(http.StatusServiceUnavailable)
	if code, out, errOut := healthcheck(t, e); code != HealthUnhealthy || out != "" || !strings.Contains(errOut, "not ready (503") {
		t.Errorf("503: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestHealthcheckFailures(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"LETTAQ_HTTP_ADDR": closed}, nil, "no answer from " + closed},
		{map[string]string{"LETTAQ_HTTP_ADDR": "off"}, nil, "LETTAQ_HTTP_ADDR is off"},
		{map[string]string{"LETTAQ_HTTP_ADDR": "nonsense"}, nil, `LETTAQ_HTTP_ADDR="nonsense"`},
		{nil, []string{"--timeout", "5"}, `--timeout "5": write a duration with a unit, e.g. 5s`},
		{nil, []string{"extra"}, `unexpected argument "extra"`},
	} {
		// Docker reserves exit code 2: everything that is not "ready" is 1.
		if code, _, errOut := healthcheck(t, tc.env, tc.args...); code != HealthUnhealthy || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want 1 and %q", tc.env, tc.args, code, errOut, tc.want)
		}
	}
}

func TestHealthcheckTarget(t *testing.T) {
	for addr, want := range map[string]string{
		"0.0.0.0:8080":   "127.0.0.1:8080",
		":8080":          "127.0.0.1:8080",
		"[::]:8080":      "[::1]:8080",
		"127.0.0.1:9000": "127.0.0.1:9000",
		"worker:8080":    "worker:8080",
	} {
		if got, err := healthcheckTarget(addr); err != nil || got != want {
			t.Errorf("healthcheckTarget(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
}
