package relay

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what a relay does; a nil *Metrics counts nothing.
type Metrics struct {
	events *prometheus.CounterVec
	calls  *prometheus.CounterVec
	limits *prometheus.CounterVec
	lag    prometheus.Histogram
	win    prometheus.Histogram
}

// NewMetrics registers the relay's metrics in reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_relay_events_total", Help: "Reply events applied, by integration.",
		}, []string{"integration"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_relay_platform_calls_total", Help: "Platform calls, by integration, method (send, edit, delete, status) and status (ok, rate_limited, paced: put off by the adapter's own pace, permanent, error).",
		}, []string{"integration", "method", "status"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_relay_rate_limited_total", Help: "Platform calls answered 429, by integration.",
		}, []string{"integration"}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_relay_lag_seconds", Help: "From an event written to the reply stream to the platform call that showed it.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
		}),
		win: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_relay_unsaved_window_seconds", Help: "From the platform's accept of a new message to its id stored in Redis: the window in which a crash leaves a message the relay does not know.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 1},
		}),
	}
	reg.MustRegister(m.events, m.calls, m.limits, m.lag, m.win)
	return m
}

func (m *Metrics) event(integration string) {
	if m != nil {
		m.events.WithLabelValues(integration).Inc()
	}
}

func (m *Metrics) call(integration, method string, err error, pendingSince, now time.Time) {
	if m == nil {
		return
	}
	status := "ok"
	var rl *RateLimitedError
	switch {
	case errors.As(err, &rl) && rl.Paced:
		status = "paced" // the adapter's own pace: no call was made
	case errors.As(err, &rl):
		status = "rate_limited"
		m.limits.WithLabelValues(integration).Inc()
	case errors.Is(err, ErrPermanent):
		status = "permanent"
	case err != nil:
		status = "error"
	}
	m.calls.WithLabelValues(integration, method, status).Inc()
	if err == nil && !pendingSince.IsZero() {
		m.lag.Observe(now.Sub(pendingSince).Seconds())
	}
}

func (m *Metrics) window(d time.Duration) {
	if m != nil {
		m.win.Observe(d.Seconds())
	}
}
