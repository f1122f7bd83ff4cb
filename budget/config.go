package budget

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"
)

// LettaPingInterval is how long a Letta stream goes without data before the server sends a
// ping. A stall timeout must sit well above it, or a turn that is only thinking is aborted.
const LettaPingInterval = 20 * time.Second

// ResendPolicy says when a turn whose stream was lost may be sent to the agent again.
type ResendPolicy string

const (
	// ResendNever never sends a turn twice within an attempt. A message that was never
	// admitted is left to the next Asynq retry (which looks for the otid again first).
	ResendNever ResendPolicy = "never"
	// ResendIfNotAdmitted sends the turn once more, with the same otid, but only when the
	// admission search found no trace of the message in the agent's history.
	ResendIfNotAdmitted ResendPolicy = "if-not-admitted"
)

// AllowsResend reports whether the policy allows one resend within an attempt.
func (p ResendPolicy) AllowsResend() bool { return p == ResendIfNotAdmitted }

// Valid reports whether p is one of the known policies.
func (p ResendPolicy) Valid() bool { return p == ResendNever || p == ResendIfNotAdmitted }

// Config holds every time limit of one attempt of a turn. The zero value is not valid: start
// from Default or FromEnv. Each field's comment names the environment variable that sets it.
type Config struct {
	ConnectTimeout    time.Duration // LETTAQ_CONNECT_TIMEOUT: no first byte of the response in time → "connect" clock
	StallTimeout      time.Duration // LETTAQ_STALL_TIMEOUT: no bytes at all (pings count) → "stall" clock
	ContentIdleNotice time.Duration // LETTAQ_CONTENT_IDLE_NOTICE: only pings this long → "still thinking" notice, never an abort (0 disables)
	StreamTotal       time.Duration // LETTAQ_STREAM_TOTAL: cap on one streaming read, from the end of connect → "total" clock
	StopGrace         time.Duration // LETTAQ_STOP_GRACE: after stop_reason, how long to wait for the body to close
	AdmissionGrace    time.Duration // LETTAQ_ADMISSION_GRACE: how long to look for the otid before concluding "not admitted"
	ContinuationMax   time.Duration // LETTAQ_CONTINUATION_MAX: how long to follow a run after the stream is lost
	PollInitial       time.Duration // LETTAQ_POLL_INITIAL: first backoff delay
	PollMax           time.Duration // LETTAQ_POLL_MAX: largest backoff delay
	PollMultiplier    float64       // LETTAQ_POLL_MULTIPLIER: backoff growth per try (>= 1)
	PollJitter        float64       // LETTAQ_POLL_JITTER: backoff spread, fraction in [0,1)
	RequestTimeout    time.Duration // LETTAQ_REQUEST_TIMEOUT: per HTTP request of lookups and polls
	Resume            bool          // LETTAQ_RESUME: resume a background run's stream before polling
	Background        bool          // LETTAQ_BACKGROUND: send turns with background=true
	ResendPolicy      ResendPolicy  // LETTAQ_RESEND_POLICY: never | if-not-admitted
	DeliveryAllowance time.Duration // LETTAQ_DELIVERY_ALLOWANCE: writing the reply events and result
	SafetyMargin      time.Duration // LETTAQ_SAFETY_MARGIN: slack on top of the worst case
}

// Default returns the default configuration. It is valid.
func Default() Config {
	return Config{
		ConnectTimeout:    30 * time.Second,
		StallTimeout:      75 * time.Second,
		ContentIdleNotice: 10 * time.Second,
		StreamTotal:       5 * time.Minute,
		StopGrace:         2 * time.Second,
		AdmissionGrace:    30 * time.Second,
		ContinuationMax:   10 * time.Minute,
		PollInitial:       1 * time.Second,
		PollMax:           15 * time.Second,
		PollMultiplier:    2,
		PollJitter:        0.2,
		RequestTimeout:    15 * time.Second,
		Resume:            true,
		Background:        false,
		ResendPolicy:      ResendIfNotAdmitted,
		DeliveryAllowance: 10 * time.Second,
		SafetyMargin:      30 * time.Second,
	}
}

// ParseError reports an environment variable (or flag) whose value could not be parsed.
type ParseError struct {
	Var   string // e.g. "LETTAQ_STALL_TIMEOUT"
	Value string // the value as given
	Err   error  // the parser's error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("%s=%q: %v", e.Var, e.Value, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// RuleError reports a broken configuration rule. Vars names every variable involved.
type RuleError struct {
	Vars []string // e.g. ["LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL"]
	Rule string   // what is wrong, with the values involved
}

func (e *RuleError) Error() string {
	return strings.Join(e.Vars, ", ") + ": " + e.Rule
}

// Validate checks every rule and returns all violations joined with errors.Join (nil when c
// is valid). Each violation is a *RuleError naming the variables involved; use errors.As to
// branch on it.
//
// Rules: no duration is negative; ConnectTimeout, StallTimeout, StreamTotal, AdmissionGrace,
// ContinuationMax, PollInitial, PollMax, RequestTimeout, DeliveryAllowance and SafetyMargin
// are above zero (StopGrace and ContentIdleNotice may be 0); StallTimeout < StreamTotal;
// PollMax >= PollInitial; PollMultiplier is finite and >= 1; PollJitter is in [0,1);
// RequestTimeout <= ContinuationMax; StopGrace <= ContinuationMax (a stream that ended with
// stop_reason spends its stop grace instead of the continuation, so the grace must fit
// there); ResendPolicy is known; and the terms of TaskTimeout add up without overflowing.
func (c Config) Validate() error {
	var errs []error
	add := func(rule string, vars ...string) {
		errs = append(errs, &RuleError{Vars: vars, Rule: rule})
	}
	type dur struct {
		name     string
		d        time.Duration
		zeroOK   bool
		zeroNote string
	}
	for _, f := range []dur{
		{"LETTAQ_CONNECT_TIMEOUT", c.ConnectTimeout, false, ""},
		{"LETTAQ_STALL_TIMEOUT", c.StallTimeout, false, ""},
		{"LETTAQ_CONTENT_IDLE_NOTICE", c.ContentIdleNotice, true, ""},
		{"LETTAQ_STREAM_TOTAL", c.StreamTotal, false, ""},
		{"LETTAQ_STOP_GRACE", c.StopGrace, true, ""},
		{"LETTAQ_ADMISSION_GRACE", c.AdmissionGrace, false, " (without it a lost turn could never be found, and would be resent blind)"},
		{"LETTAQ_CONTINUATION_MAX", c.ContinuationMax, false, ""},
		{"LETTAQ_POLL_INITIAL", c.PollInitial, false, ""},
		{"LETTAQ_POLL_MAX", c.PollMax, false, ""},
		{"LETTAQ_REQUEST_TIMEOUT", c.RequestTimeout, false, ""},
		{"LETTAQ_DELIVERY_ALLOWANCE", c.DeliveryAllowance, false, ""},
		{"LETTAQ_SAFETY_MARGIN", c.SafetyMargin, false, " (the handler must return before Asynq's deadline)"},
	} {
		switch {
		case f.d < 0:
			add(fmt.Sprintf("must not be negative (got %v)", f.d), f.name)
		case f.d == 0 && !f.zeroOK:
			add("must be greater than 0"+f.zeroNote, f.name)
		}
	}
	if c.StallTimeout > 0 && c.StreamTotal > 0 && c.StallTimeout >= c.StreamTotal {
		add(fmt.Sprintf("stall timeout (%v) must be less than stream total (%v)", c.StallTimeout, c.StreamTotal),
			"LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL")
	}
	if c.PollInitial > 0 && c.PollMax > 0 && c.PollMax < c.PollInitial {
		add(fmt.Sprintf("poll max (%v) must not be less than poll initial (%v)", c.PollMax, c.PollInitial),
			"LETTAQ_POLL_MAX", "LETTAQ_POLL_INITIAL")
	}
	switch m := c.PollMultiplier; {
	case math.IsNaN(m) || math.IsInf(m, 0):
		add(fmt.Sprintf("must be a finite number (got %v)", m), "LETTAQ_POLL_MULTIPLIER")
	case m < 1:
		add(fmt.Sprintf("must be at least 1 (got %v)", m), "LETTAQ_POLL_MULTIPLIER")
	}
	if j := c.PollJitter; math.IsNaN(j) || j < 0 || j >= 1 {
		add(fmt.Sprintf("must be in [0,1) (got %v)", j), "LETTAQ_POLL_JITTER")
	}
	if c.RequestTimeout > 0 && c.ContinuationMax > 0 && c.RequestTimeout > c.ContinuationMax {
		add(fmt.Sprintf("request timeout (%v) must not exceed continuation max (%v)", c.RequestTimeout, c.ContinuationMax),
			"LETTAQ_REQUEST_TIMEOUT", "LETTAQ_CONTINUATION_MAX")
	}
	if c.StopGrace > 0 && c.ContinuationMax > 0 && c.StopGrace > c.ContinuationMax {
		add(fmt.Sprintf("stop grace (%v) must not exceed continuation max (%v)", c.StopGrace, c.ContinuationMax),
			"LETTAQ_STOP_GRACE", "LETTAQ_CONTINUATION_MAX")
	}
	if !c.ResendPolicy.Valid() {
		add(fmt.Sprintf("unknown resend policy %q (want %q or %q)", string(c.ResendPolicy), ResendNever, ResendIfNotAdmitted),
			"LETTAQ_RESEND_POLICY")
	}
	if _, overflow := c.worstCaseSum(); overflow {
		var vars []string
		for _, p := range c.Terms() {
			vars = appendOnce(vars, p.Var)
		}
		add("the terms add up past the largest task timeout that can be represented", vars...)
	}
	return errors.Join(errs...)
}

func appendOnce(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// Warnings returns advice about settings that are valid but probably unintended, such as a
// stall timeout that a healthy, thinking agent (which only pings every LettaPingInterval)
// would trip. The worker should log them at startup. Tests against a fast simulated server
// may ignore them.
func (c Config) Warnings() []string {
	var w []string
	if c.StallTimeout > 0 && c.StallTimeout <= 2*LettaPingInterval {
		w = append(w, fmt.Sprintf("LETTAQ_STALL_TIMEOUT (%v) is not well above Letta's %v ping interval: a thinking agent may be cut off as stalled",
			c.StallTimeout, LettaPingInterval))
	}
	if c.ContentIdleNotice > 0 && c.StreamTotal > 0 && c.ContentIdleNotice >= c.StreamTotal {
		w = append(w, fmt.Sprintf("LETTAQ_CONTENT_IDLE_NOTICE (%v) is not below LETTAQ_STREAM_TOTAL (%v): the notice can never fire",
			c.ContentIdleNotice, c.StreamTotal))
	}
	return w
}

// Term names, as used by Terms and by Step.Term: a term is one named part of an attempt's
// time budget.
const (
	TermThread             = "thread"
	TermConnect            = "connect"
	TermStream             = "stream"
	TermAdmission          = "admission"
	TermContinuation       = "continuation"
	TermResendConnect      = "resend-connect"
	TermResendStream       = "resend-stream"
	TermResendAdmission    = "resend-admission"
	TermResendContinuation = "resend-continuation"
	TermDelivery           = "delivery"
	TermSafetyMargin       = "safety-margin"
)

// Term is one named part of an attempt's worst case, with the longest it may take and the
// variable that sets that length.
type Term struct {
	Name string        // one of the Term… constants
	Max  time.Duration // the longest this term may take
	Var  string        // the environment variable that sets Max
}

// ThreadResolution is the longest an attempt may take to find or create the chat's Letta
// conversation before it sends (thread mode conversation): one list request and one create
// request, each bounded by RequestTimeout. It saturates at the largest Duration (Validate then
// refuses the configuration: its terms add up past it).
func (c Config) ThreadResolution() time.Duration {
	if c.RequestTimeout > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return 2 * c.RequestTimeout
}

// Terms lists, in order, the terms whose maxima TaskTimeout adds up: thread (finding or
// creating the chat's Letta conversation); connect, stream, admission, continuation; the same
// four again (prefixed "resend-") when the resend policy allows one resend; then delivery and
// the safety margin.
func (c Config) Terms() []Term { return c.appendTerms(nil) }

// maxTerms is the most terms Terms returns.
const maxTerms = 11

// appendTerms appends Terms to ps (the sum of an enqueue's task timeout
// takes them in an array of its frame: nothing allocated per task).
func (c Config) appendTerms(ps []Term) []Term {
	ps = append(ps, []Term{
		{TermThread, c.ThreadResolution(), "LETTAQ_REQUEST_TIMEOUT"},
		{TermConnect, c.ConnectTimeout, "LETTAQ_CONNECT_TIMEOUT"},
		{TermStream, c.StreamTotal, "LETTAQ_STREAM_TOTAL"},
		{TermAdmission, c.AdmissionGrace, "LETTAQ_ADMISSION_GRACE"},
		{TermContinuation, c.ContinuationMax, "LETTAQ_CONTINUATION_MAX"},
	}...)
	if c.ResendPolicy.AllowsResend() {
		ps = append(ps,
			Term{TermResendConnect, c.ConnectTimeout, "LETTAQ_CONNECT_TIMEOUT"},
			Term{TermResendStream, c.StreamTotal, "LETTAQ_STREAM_TOTAL"},
			Term{TermResendAdmission, c.AdmissionGrace, "LETTAQ_ADMISSION_GRACE"},
			Term{TermResendContinuation, c.ContinuationMax, "LETTAQ_CONTINUATION_MAX"},
		)
	}
	return append(ps,
		Term{TermDelivery, c.DeliveryAllowance, "LETTAQ_DELIVERY_ALLOWANCE"},
		Term{TermSafetyMargin, c.SafetyMargin, "LETTAQ_SAFETY_MARGIN"},
	)
}

// worstCaseSum adds up the terms (negative ones count as 0), saturating at the largest
// Duration; overflow reports whether it saturated.
func (c Config) worstCaseSum() (sum time.Duration, overflow bool) {
	var buf [maxTerms]Term
	for _, p := range c.appendTerms(buf[:0]) {
		if p.Max <= 0 {
			continue
		}
		if sum > math.MaxInt64-p.Max {
			return math.MaxInt64, true
		}
		sum += p.Max
	}
	return sum, false
}

// TaskTimeout is the Asynq task timeout for one attempt of a turn: the sum of Terms (the
// worst case of one attempt plus the safety margin), rounded up to whole seconds, and never
// less than 1s. Asynq stores a task's timeout as whole seconds, truncating (so 1.5s would
// become 1s and 0.5s would become 0, which Asynq reads as "no timeout set" and replaces with
// its 30-minute default); rounding up keeps the stored value at or above the budget.
func (c Config) TaskTimeout() time.Duration {
	sum, _ := c.worstCaseSum()
	return ceilSeconds(sum)
}

// ceilSeconds rounds d up to a whole number of seconds, at least 1s, saturating at the
// largest whole number of seconds a Duration holds.
func ceilSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	if rem := d % time.Second; rem != 0 {
		if d > math.MaxInt64-(time.Second-rem) {
			return math.MaxInt64 / time.Second * time.Second
		}
		d += time.Second - rem
	}
	return d
}

// Backoff returns the poll/lookup backoff of c.
func (c Config) Backoff() Backoff {
	return Backoff{Initial: c.PollInitial, Max: c.PollMax, Multiplier: c.PollMultiplier, Jitter: c.PollJitter}
}

// ClampSleep returns d bounded to [0, remaining]: the sleep that may be taken when only
// remaining is left of the term. A negative d or remaining counts as 0.
func (c Config) ClampSleep(d, remaining time.Duration) time.Duration {
	return clamp(d, remaining)
}

// ClampRequest returns the timeout for one HTTP request of a lookup or poll when remaining
// is left of the term: min(RequestTimeout, remaining), never negative. 0 means "no time
// left: don't send".
func (c Config) ClampRequest(remaining time.Duration) time.Duration {
	return clamp(c.RequestTimeout, remaining)
}

func clamp(d, limit time.Duration) time.Duration {
	d, limit = max(d, 0), max(limit, 0)
	return min(d, limit)
}

// LogValue implements slog.LogValuer: every setting in a compact group, durations written
// as short strings ("75s", "5m"), plus the resulting task_timeout.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("connect", FormatDuration(c.ConnectTimeout)),
		slog.String("stall", FormatDuration(c.StallTimeout)),
		slog.String("content_idle", FormatDuration(c.ContentIdleNotice)),
		slog.String("stream_total", FormatDuration(c.StreamTotal)),
		slog.String("stop_grace", FormatDuration(c.StopGrace)),
		slog.String("admission_grace", FormatDuration(c.AdmissionGrace)),
		slog.String("continuation_max", FormatDuration(c.ContinuationMax)),
		slog.Group("poll",
			slog.String("initial", FormatDuration(c.PollInitial)),
			slog.String("max", FormatDuration(c.PollMax)),
			slog.Float64("multiplier", c.PollMultiplier),
			slog.Float64("jitter", c.PollJitter),
		),
		slog.String("request", FormatDuration(c.RequestTimeout)),
		slog.Bool("resume", c.Resume),
		slog.Bool("background", c.Background),
		slog.String("resend", string(c.ResendPolicy)),
		slog.String("delivery", FormatDuration(c.DeliveryAllowance)),
		slog.String("margin", FormatDuration(c.SafetyMargin)),
		slog.String("task_timeout", FormatDuration(c.TaskTimeout())),
	)
}

// FormatDuration writes whole hours, minutes or seconds in one unit ("2h", "5m", "75s") and
// anything else as time.Duration does. The result always parses with time.ParseDuration.
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
