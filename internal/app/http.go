package app

import (
	"context"
	"crypto/subtle"
	"encoding/json"
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
	// Redis answers /readyz (PING).
	Redis redis.UniversalClient
	// RedisConnOpt is what the monitor connects with; nil leaves /monitor/ out.
	RedisConnOpt asynq.RedisConnOpt
	// MonitorWritable lets the monitor change tasks; read-only otherwise.
	MonitorWritable bool
	// Metrics served at /metrics; nil leaves it out.
	Metrics *Metrics
	// Enqueue, when set, is mounted at /enqueue.
	Enqueue http.Handler
	// Budget, when set, is served at /budget: the task options producers must use.
	Budget *BudgetInfo
	// Ready, when set, must also pass for /readyz (e.g. "the worker is taking tasks").
	Ready  func() error
	Logger *slog.Logger
}

const tokenCookie = "lettaq_token"

// NewHTTPHandler returns the listener's routes and a func that closes the monitor's Redis
// connections:
//
//	/healthz    200 while the process runs (no auth)
//	/readyz     200 when Redis answers PING (no auth), 503 otherwise
//	/metrics    Prometheus (auth)
//	/monitor/   asynqmon (auth; read-only unless MonitorWritable)
//	/enqueue    the queue's HTTP enqueue endpoint, when provided (auth)
//	/budget     the task timeout and task options producers must use, when provided (auth)
func NewHTTPHandler(o HTTPOptions) (http.Handler, func()) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status := map[string]string{"redis": "ok"}
		code := http.StatusOK
		if o.Redis == nil {
			status["redis"], code = "not configured", http.StatusServiceUnavailable
		} else if err := o.Redis.Ping(ctx).Err(); err != nil {
			status["redis"], code = err.Error(), http.StatusServiceUnavailable
		}
		if o.Ready != nil {
			if err := o.Ready(); err != nil {
				status["worker"], code = err.Error(), http.StatusServiceUnavailable
			} else {
				status["worker"] = "ok"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(status)
	})
	closer := func() {}
	auth := requireToken(o.Token)
	if o.Metrics != nil {
		mux.Handle("GET /metrics", auth(promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{})))
	}
	if o.RedisConnOpt != nil {
		mon := asynqmon.New(asynqmon.Options{RootPath: "/monitor", RedisConnOpt: o.RedisConnOpt, ReadOnly: !o.MonitorWritable})
		closer = func() { _ = mon.Close() }
		mux.Handle("/monitor/", auth(mon))
		mux.Handle("GET /monitor", http.RedirectHandler("/monitor/", http.StatusMovedPermanently))
	}
	if o.Enqueue != nil {
		mux.Handle("/enqueue", auth(o.Enqueue))
	}
	if o.Budget != nil {
		mux.Handle("GET /budget", auth(budgetHandler(*o.Budget)))
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("lettaq worker: /healthz /readyz /metrics /monitor/" + map[bool]string{true: " /enqueue", false: ""}[o.Enqueue != nil] +
			map[bool]string{true: " /budget", false: ""}[o.Budget != nil] + "\n"))
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
