package app

import (
	"context"
	"log/slog"
	"net/http"
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
	// Redis answers /readyz: PINGed every second in the background (or written to: ProbeWrite),
	// /readyz answers from the last result.
	Redis redis.UniversalClient
	// ProbeWrite, when set, is the background check instead of the PING: a small write
	// (queue.Worker.ProbeWrite), so that a Redis that answers but refuses writes (full, under
	// noeviction) makes the worker not ready.
	ProbeWrite func(context.Context) error
	// RedisConnOpt is what the monitor connects with; nil leaves /monitor/ out.
	RedisConnOpt asynq.RedisConnOpt
	// MonitorWritable lets the monitor change tasks; read-only otherwise.
	MonitorWritable bool
	// Metrics served at /metrics; nil leaves it out.
	Metrics *Metrics
	// Enqueue, when set, is mounted at /enqueue.
	Enqueue http.Handler
	// Cancel, when set, is mounted at /cancel (auth, as /enqueue).
	Cancel http.Handler
	// Notify, when set, is mounted at /notify (auth, as /enqueue).
	Notify http.Handler
	// Budget, when set, is served at /budget: the task options producers must use.
	Budget *BudgetInfo
	// Turns, when set, is mounted at /turns/{id} (auth): lettaq's view of one turn.
	Turns http.Handler
	// Chat, when set, is the web chat page (relay/webchat), mounted at /chat/ (auth, as
	// /monitor/, whose ?token= entry it shares).
	Chat http.Handler
	// Ready, when set, must also pass for /readyz (e.g. "the worker is taking tasks").
	Ready  func() error
	Logger *slog.Logger

	probe *redisProbe // tests: the probe behind /readyz instead of one made on Redis
}

// NewHTTPHandler returns the listener's routes and a func that closes the monitor's Redis
// connections. State-changing requests from another origin's page are refused on every path
// (see refuseCrossOrigin); without a token, so is every request not addressed to a loopback
// host but /healthz and /readyz (see loopbackHostOnly):
//
//	/healthz    200 while the process runs (no auth)
//	/readyz     200 {"status":"ready"} when the last check of Redis (every 1 s, 3 s timeout) passed and Ready
//	            passes, 503 {"status":"not ready"} otherwise (no auth); ?verbose=1 (auth) says why
//	/metrics    Prometheus (auth)
//	/monitor/   asynqmon (auth; read-only unless MonitorWritable)
//	/enqueue    the queue's HTTP enqueue endpoint, when provided (auth)
//	/cancel     stop a turn (httpapi.CancelHandler), when provided (auth)
//	/notify     write a message into a chat (httpapi.NotifyHandler), when provided (auth)
//	/budget     the task timeout and task options producers must use, when provided (auth)
//	/turns/{id} a turn: summary, Asynq state, result and journal record (auth)
//	/chat/      the web chat page, when provided (auth; takes ?token= once, as /monitor/)
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
		probe = newRedisProbe(o.Redis, o.ProbeWrite, time.Second, 3*time.Second, o.Logger)
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
		mux.HandleFunc("GET /monitor", func(w http.ResponseWriter, r *http.Request) {
			u := *r.URL // keep the query (?token=)
			u.Path = "/monitor/"
			http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
		})
	}
	if o.Enqueue != nil {
		mux.Handle("/enqueue", auth(o.Enqueue))
	}
	if o.Cancel != nil {
		mux.Handle("/cancel", auth(o.Cancel))
	}
	if o.Notify != nil {
		mux.Handle("/notify", auth(o.Notify))
	}
	if o.Budget != nil {
		mux.Handle("GET /budget", auth(budgetHandler(*o.Budget)))
	}
	if o.Turns != nil {
		mux.Handle("GET /turns/{id...}", auth(o.Turns))
	}
	if o.Chat != nil {
		mux.Handle("/chat/", auth(http.StripPrefix("/chat", o.Chat)))
		mux.HandleFunc("GET /chat", func(w http.ResponseWriter, r *http.Request) {
			u := *r.URL // keep the query (?token=)
			u.Path = "/chat/"
			http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
		})
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("lettaq worker: /healthz /readyz /metrics /monitor/" + map[bool]string{true: " /enqueue", false: ""}[o.Enqueue != nil] +
			map[bool]string{true: " /cancel", false: ""}[o.Cancel != nil] +
			map[bool]string{true: " /notify", false: ""}[o.Notify != nil] +
			map[bool]string{true: " /budget", false: ""}[o.Budget != nil] +
			map[bool]string{true: " /chat/", false: ""}[o.Chat != nil] + "\n"))
	})
	h := refuseCrossOrigin(mux)
	if o.Token == "" {
		h = loopbackHostOnly(h)
	}
	return h, closer
}
