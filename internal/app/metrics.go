package app

import (
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	lqueue "github.com/lettaq/lettaq/queue"
)

// Metrics is the worker's Prometheus registry: turn metrics (it is the queue's Observer) and
// Asynq's queue gauges (read from Redis at scrape time).
type Metrics struct {
	Registry *prometheus.Registry

	turns        *prometheus.CounterVec
	attempts     *prometheus.CounterVec
	started      *prometheus.CounterVec
	timeouts     *prometheus.CounterVec
	polls        prometheus.Counter
	resumes      prometheus.Counter
	resends      *prometheus.CounterVec
	inFlight     prometheus.Gauge
	ttft         prometheus.Histogram
	turnDuration prometheus.Histogram
	attemptDur   prometheus.Histogram
	queueWait    prometheus.Histogram
	approvals    *prometheus.CounterVec
	humanWait    prometheus.Histogram
	cancelled    *prometheus.CounterVec
	takenOver    *prometheus.CounterVec
}

// turnBuckets cover a quick answer (~1s) up to a long agent turn (minutes).
var turnBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}

// NewMetrics returns the registry with Go and process collectors and, when inspector is not
// nil, Asynq's queue gauges.
func NewMetrics(inspector *asynq.Inspector) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_turns_total", Help: "Turns finished, by queue and outcome (answered, approval_required, failed, cancelled).",
		}, []string{"queue", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_attempts_total", Help: "Attempts ended, by queue and result (done, retry, busy, archived, taken_over).",
		}, []string{"queue", "result"}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_attempts_started_total", Help: "Attempts started, by queue and kind (first, retry).",
		}, []string{"queue", "kind"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_stream_timeouts_total", Help: "Streams ended by a clock, by clock (connect, stall, total).",
		}, []string{"clock"}),
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lettaq_continuation_polls_total", Help: "Polls of a run's messages after its stream was lost.",
		}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lettaq_continuation_resumes_total", Help: "Resumed run streams after a stream was lost.",
		}),
		resends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_resend_decisions_total", Help: "Resend gate decisions for lost turns (resent: sent again with the same otid; forbidden).",
		}, []string{"decision"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lettaq_attempts_in_flight", Help: "Attempts this worker is running now.",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_time_to_first_token_seconds", Help: "From enqueue to the first answer text.", Buckets: turnBuckets,
		}),
		turnDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_turn_duration_seconds", Help: "From enqueue to the end of the turn.", Buckets: turnBuckets,
		}),
		attemptDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_attempt_duration_seconds", Help: "Duration of one attempt.", Buckets: turnBuckets,
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_queue_wait_seconds", Help: "From enqueue to the start of an attempt.", Buckets: turnBuckets,
		}),
		cancelled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_turns_cancelled_total", Help: "Turns this worker ended cancelled (enqueue cancel, POST /cancel), by queue and phase (waiting, before_send, streaming, continuation). A waiting turn that enqueue cancel (another process) ends itself is not counted here.",
		}, []string{"queue", "phase"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_approvals_total", Help: "Approval requests by event (requested; answered by a person or a policy; expired: denied when nobody answered).",
		}, []string{"event"}),
		humanWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lettaq_approval_wait_seconds", Help: "From an approval request to its answer (or expiry): time waiting for a human.",
			Buckets: []float64{1, 5, 15, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
		}),
		takenOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lettaq_turns_taken_over_total", Help: "Turns of a dead worker this worker took over (enqueued their continuation), by queue.",
		}, []string{"queue"}),
	}
	reg.MustRegister(m.cancelled, m.takenOver, m.approvals, m.humanWait, m.turns, m.attempts, m.started, m.timeouts, m.polls, m.resumes, m.resends, m.inFlight,
		m.ttft, m.turnDuration, m.attemptDur, m.queueWait,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if inspector != nil {
		reg.MustRegister(&queueCollector{inspector: inspector})
	}
	return m
}

var _ interface {
	Approval(string, time.Duration)
} = (*Metrics)(nil)

// TurnTakenOver implements queue.TakeoverObserver.
func (m *Metrics) TurnTakenOver(queue string) { m.takenOver.WithLabelValues(queue).Inc() }

// Approval implements queue.ApprovalObserver.
func (m *Metrics) Approval(event string, waited time.Duration) {
	m.approvals.WithLabelValues(event).Inc()
	if event != "requested" {
		m.humanWait.Observe(waited.Seconds())
	}
}

// TaskStarted implements queue.Observer.
func (m *Metrics) TaskStarted(queue string, attempt int, queueWait time.Duration) {
	kind := "first"
	if attempt > 1 {
		kind = "retry"
	}
	m.started.WithLabelValues(queue, kind).Inc()
	m.inFlight.Inc()
	if queueWait > 0 {
		m.queueWait.Observe(queueWait.Seconds())
	}
}

// StreamTimeout implements queue.Observer.
func (m *Metrics) StreamTimeout(clock string) { m.timeouts.WithLabelValues(clock).Inc() }

// Continuation implements queue.Observer.
func (m *Metrics) Continuation(polls, resumes int) {
	m.polls.Add(float64(max(polls, 0)))
	m.resumes.Add(float64(max(resumes, 0)))
}

// Resend implements queue.Observer.
func (m *Metrics) Resend(decision string) { m.resends.WithLabelValues(decision).Inc() }

// AttemptFinished implements queue.Observer.
func (m *Metrics) AttemptFinished(queue, result string, d time.Duration) {
	m.inFlight.Dec()
	m.attempts.WithLabelValues(queue, result).Inc()
	m.attemptDur.Observe(d.Seconds())
}

// TurnCancelled implements queue.CancelObserver.
func (m *Metrics) TurnCancelled(queue, phase string) { m.cancelled.WithLabelValues(queue, phase).Inc() }

// TurnFinished implements queue.Observer.
func (m *Metrics) TurnFinished(queue, outcome string, latency, ttft time.Duration) {
	m.turns.WithLabelValues(queue, outcome).Inc()
	if latency > 0 {
		m.turnDuration.Observe(latency.Seconds())
	}
	if ttft > 0 {
		m.ttft.Observe(ttft.Seconds())
	}
}

// queueCollector reads Asynq's queue state at scrape time (the same gauges as Asynq's
// x/metrics collector, which v0.26 does not ship in its main module).
type queueCollector struct{ inspector *asynq.Inspector }

var (
	descTasks = prometheus.NewDesc("asynq_tasks_enqueued_total",
		"Tasks in the queue now, by state.", []string{"queue", "state"}, nil)
	descSize = prometheus.NewDesc("asynq_queue_size",
		"Tasks in the queue now, all states.", []string{"queue"}, nil)
	descLatency = prometheus.NewDesc("asynq_queue_latency_seconds",
		"Age of the oldest pending task.", []string{"queue"}, nil)
	descMemory = prometheus.NewDesc("asynq_queue_memory_usage_approx_bytes",
		"Approximate Redis memory used by the queue.", []string{"queue"}, nil)
	descProcessed = prometheus.NewDesc("asynq_tasks_processed_total",
		"Tasks processed (succeeded or failed), all time.", []string{"queue"}, nil)
	descFailed = prometheus.NewDesc("asynq_tasks_failed_total",
		"Tasks failed, all time.", []string{"queue"}, nil)
	descPaused = prometheus.NewDesc("asynq_queue_paused_total",
		"1 when the queue is paused.", []string{"queue"}, nil)
	descWaiting = prometheus.NewDesc("lettaq_turns_waiting",
		"Turns waiting for their conversation's turn ahead to end, or for their chat's approval request to be answered: scheduled tasks (how a waiting turn waits) plus tasks put back by an older worker's ordering safety net; approval expiries are not counted.", []string{"queue"}, nil)
	descApprovalsPending = prometheus.NewDesc("lettaq_approvals_pending",
		"Approval requests waiting for a human: the scheduled expiries of unanswered requests.", []string{"queue"}, nil)
	descScrapeErr = prometheus.NewDesc("lettaq_queue_scrape_errors",
		"1 when reading the queues from Redis failed during this scrape.", nil, nil)
)

func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTasks, descSize, descLatency, descMemory, descProcessed, descFailed, descPaused, descWaiting, descApprovalsPending, descScrapeErr} {
		ch <- d
	}
}

func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	names, err := q.inspector.Queues()
	failed := 0.0
	if err != nil {
		failed = 1
	}
	for _, name := range names {
		info, err := q.inspector.GetQueueInfo(name)
		if err != nil {
			failed = 1
			continue
		}
		for state, n := range map[string]int{
			"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled, "retry": info.Retry,
			"archived": info.Archived, "completed": info.Completed, "aggregating": info.Aggregating,
		} {
			ch <- prometheus.MustNewConstMetric(descTasks, prometheus.GaugeValue, float64(n), name, state)
		}
		ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(info.Size), name)
		ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, info.Latency.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(info.MemoryUsage), name)
		ch <- prometheus.MustNewConstMetric(descProcessed, prometheus.CounterValue, float64(info.ProcessedTotal), name)
		ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(info.FailedTotal), name)
		paused := 0.0
		if info.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, paused, name)
		putBack, err := q.putBack(name, info.Retry)
		if err != nil {
			failed = 1
		}
		expiries, err := q.expiries(name, info.Scheduled)
		if err != nil {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(info.Scheduled-expiries+putBack), name)
		ch <- prometheus.MustNewConstMetric(descApprovalsPending, prometheus.GaugeValue, float64(expiries), name)
	}
	ch <- prometheus.MustNewConstMetric(descScrapeErr, prometheus.GaugeValue, failed)
}

// expiries counts the scheduled tasks of queue that are approval expiries (a pending approval,
// not a waiting turn); it reads at most the first 500.
func (q *queueCollector) expiries(queue string, scheduled int) (int, error) {
	if scheduled == 0 {
		return 0, nil
	}
	tasks, err := q.inspector.ListScheduledTasks(queue, asynq.PageSize(500))
	n := 0
	for _, t := range tasks {
		if m, err := lqueue.DecodePayload(t.Payload); err == nil && m.IsApprovalExpiry() {
			n++
		}
	}
	return n, err
}

// putBack counts the retry tasks of queue that only wait for their turn (an ordering put-back,
// not a failure); it reads at most the first 500.
func (q *queueCollector) putBack(queue string, retry int) (int, error) {
	if retry == 0 {
		return 0, nil
	}
	tasks, err := q.inspector.ListRetryTasks(queue, asynq.PageSize(500))
	n := 0
	for _, t := range tasks {
		if strings.Contains(t.LastErr, "ordering: not your turn") {
			n++
		}
	}
	return n, err
}
