package app

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// HTTPOptions configures the worker's one HTTP listener.
type HTTPOptions struct {
	// Token protects /metrics, /monitor/ and /enqueue when set ("" leaves them open, which
	// the worker allows only on loopback).
	Token string
	// Redis answers /readyz: PINGed every second in the background, /readyz answers from the
	// last result.
	Redis redis.UniversalClient
	// RedisConnOpt is what the monitor connects with; nil leaves /monitor/ out.
	RedisConnOpt asynq.RedisConnOpt
	// MonitorWritable lets the monitor change tasks; read-only otherwise.
	MonitorWritable bool
	// Metrics served at /metrics; nil leaves it out.
	Metrics *Metrics
	// Enqueue, when set, is mounted at /enqueue.
	Enqueue http.Handler
	// Turns, when set, is mounted at /turns/{id} (auth): lettaq's view of one turn.
	Turns http.Handler
	// Ready, when set, must also pass for /readyz (e.g. "the worker is taking tasks").
	Ready  func() error
	Logger *slog.Logger

	probe *redisProbe // tests: the probe behind /readyz instead of one made on Redis
}

const tokenCookie = "lettaq_token"

// NewHTTPHandler returns the listener's routes and a func that closes the monitor's Redis
// connections:
//
//	/healthz    200 while the process runs (no auth)
//	/readyz     200 {"status":"ready"} when the last PING of Redis (every 1 s, 3 s timeout) answered and Ready
//	            passes, 503 {"status":"not ready"} otherwise (no auth); ?verbose=1 (auth) says why
//	/metrics    Prometheus (auth)
//	/monitor/   asynqmon (auth; read-only unless MonitorWritable)
//	/enqueue    the queue's HTTP enqueue endpoint, when provided (auth)
//	/turns/{id} a turn: summary, Asynq state, result and journal record (auth)
func NewHTTPHandler(o HTTPOptions) (http.Handler, func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	closer := func() {}
	auth := requireToken(o.Token)
	probe := o.probe
	if probe == nil && o.Redis != nil {
		probe = newRedisProbe(o.Redis, time.Second, 3*time.Second, o.Logger)
		closer = probe.Close
	}
	mux.Handle("GET /readyz", readyzHandler(probe, o.Ready, auth))
	if o.Metrics != nil {
		mux.Handle("GET /metrics", auth(promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{})))
	}
	if o.RedisConnOpt != nil {
		mon := asynqmon.New(asynqmon.Options{RootPath: "/monitor", RedisConnOpt: o.RedisConnOpt, ReadOnly: !o.MonitorWritable})
		closeProbe := closer
		closer = func() { _ = mon.Close(); closeProbe() }
		mux.Handle("/monitor/", auth(monitorPages(mon, !o.MonitorWritable)))
		mux.Handle("GET /monitor", http.RedirectHandler("/monitor/", http.StatusMovedPermanently))
	}
	if o.Enqueue != nil {
		mux.Handle("/enqueue", auth(o.Enqueue))
	}
	if o.Turns != nil {
		mux.Handle("GET /turns/{id...}", auth(o.Turns))
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("lettaq worker: /healthz /readyz /metrics /monitor/" + map[bool]string{true: " /enqueue", false: ""}[o.Enqueue != nil] + "\n"))
	})
	return mux, closer
}

// requireToken accepts the token as "Authorization: Bearer <token>", as the password of basic
// auth (any user name: browsers ask for it), or as ?token=<token>, which also sets a cookie
// so the monitor's own requests pass. An empty token lets everything through.
func requireToken(token string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if token == "" {
			return next
		}
		want := []byte(token)
		ok := func(got string) bool { return got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 }
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") && ok(strings.TrimPrefix(h, "Bearer ")) {
				next.ServeHTTP(w, r)
				return
			}
			if _, pw, has := r.BasicAuth(); has && ok(pw) {
				next.ServeHTTP(w, r)
				return
			}
			if c, err := r.Cookie(tokenCookie); err == nil && ok(c.Value) {
				next.ServeHTTP(w, r)
				return
			}
			if q := r.URL.Query().Get("token"); ok(q) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true,
					SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
				if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/monitor") {
					// Drop the token from the address bar.
					u := *r.URL
					qs := u.Query()
					qs.Del("token")
					u.RawQuery = qs.Encode()
					http.Redirect(w, r, u.RequestURI(), http.StatusFound)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("WWW-Authenticate", `Basic realm="lettaq", charset="UTF-8"`)
			http.Error(w, "unauthorized: send the LETTAQ_HTTP_TOKEN as a Bearer token, as the basic-auth password, or as ?token=", http.StatusUnauthorized)
		})
	}
}
