package budget

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("Default().Warnings() = %q, want none", w)
	}
	want := Config{
		ConnectTimeout: 30 * time.Second, StallTimeout: 75 * time.Second, ContentIdleNotice: 10 * time.Second,
		StreamTotal: 5 * time.Minute, StopGrace: 2 * time.Second, AdmissionGrace: 30 * time.Second,
		ContinuationMax: 10 * time.Minute, PollInitial: time.Second, PollMax: 15 * time.Second,
		PollMultiplier: 2, PollJitter: 0.2, RequestTimeout: 15 * time.Second, Resume: true, Background: false,
		ResendPolicy: ResendIfNotAdmitted, DeliveryAllowance: 10 * time.Second, SafetyMargin: 30 * time.Second,
	}
	if c != want {
		t.Errorf("Default() = %+v, want %+v", c, want)
	}
}

func TestZeroConfigIsInvalid(t *testing.T) {
	err := Config{}.Validate()
	if err == nil {
		t.Fatal("Config{}.Validate() = nil, want errors")
	}
	// Every variable that may not be zero is named, in one joined error.
	for _, v := range []string{"LETTAQ_CONNECT_TIMEOUT", "LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL",
		"LETTAQ_ADMISSION_GRACE", "LETTAQ_CONTINUATION_MAX", "LETTAQ_POLL_INITIAL", "LETTAQ_POLL_MAX",
		"LETTAQ_POLL_MULTIPLIER", "LETTAQ_REQUEST_TIMEOUT", "LETTAQ_RESEND_POLICY",
		"LETTAQ_DELIVERY_ALLOWANCE", "LETTAQ_SAFETY_MARGIN"} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("error does not name %s:\n%v", v, err)
		}
	}
	for _, v := range []string{"LETTAQ_CONTENT_IDLE_NOTICE", "LETTAQ_STOP_GRACE", "LETTAQ_POLL_JITTER"} {
		if strings.Contains(err.Error(), v) {
			t.Errorf("error names %s, whose zero is allowed:\n%v", v, err)
		}
	}
}

func TestValidateRules(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		vars []string // the variables the single violation names
		rule string   // a substring of the rule
	}{
		{"negative connect", func(c *Config) { c.ConnectTimeout = -time.Second }, []string{"LETTAQ_CONNECT_TIMEOUT"}, "negative"},
		{"zero connect", func(c *Config) { c.ConnectTimeout = 0 }, []string{"LETTAQ_CONNECT_TIMEOUT"}, "greater than 0"},
		{"negative stall", func(c *Config) { c.StallTimeout = -1 }, []string{"LETTAQ_STALL_TIMEOUT"}, "negative"},
		{"zero stall", func(c *Config) { c.StallTimeout = 0 }, []string{"LETTAQ_STALL_TIMEOUT"}, "greater than 0"},
		{"negative content idle", func(c *Config) { c.ContentIdleNotice = -1 }, []string{"LETTAQ_CONTENT_IDLE_NOTICE"}, "negative"},
		{"zero stream total", func(c *Config) { c.StreamTotal = 0 }, []string{"LETTAQ_STREAM_TOTAL"}, "greater than 0"},
		{"negative stream total", func(c *Config) { c.StreamTotal = -time.Minute }, []string{"LETTAQ_STREAM_TOTAL"}, "negative"},
		{"negative stop grace", func(c *Config) { c.StopGrace = -1 }, []string{"LETTAQ_STOP_GRACE"}, "negative"},
		{"zero admission", func(c *Config) { c.AdmissionGrace = 0 }, []string{"LETTAQ_ADMISSION_GRACE"}, "greater than 0"},
		{"negative admission", func(c *Config) { c.AdmissionGrace = -1 }, []string{"LETTAQ_ADMISSION_GRACE"}, "negative"},
		{"zero continuation", func(c *Config) { c.ContinuationMax = 0 }, []string{"LETTAQ_CONTINUATION_MAX"}, "greater than 0"},
		{"zero poll initial", func(c *Config) { c.PollInitial = 0 }, []string{"LETTAQ_POLL_INITIAL"}, "greater than 0"},
		{"negative poll max", func(c *Config) { c.PollMax = -1 }, []string{"LETTAQ_POLL_MAX"}, "negative"},
		{"zero request", func(c *Config) { c.RequestTimeout = 0 }, []string{"LETTAQ_REQUEST_TIMEOUT"}, "greater than 0"},
		{"zero delivery", func(c *Config) { c.DeliveryAllowance = 0 }, []string{"LETTAQ_DELIVERY_ALLOWANCE"}, "greater than 0"},
		{"zero margin", func(c *Config) { c.SafetyMargin = 0 }, []string{"LETTAQ_SAFETY_MARGIN"}, "greater than 0"},
		{"negative margin", func(c *Config) { c.SafetyMargin = -time.Second }, []string{"LETTAQ_SAFETY_MARGIN"}, "negative"},
		{"stall equals total", func(c *Config) { c.StallTimeout = c.StreamTotal }, []string{"LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL"}, "less than stream total"},
		{"stall above total", func(c *Config) { c.StallTimeout = 10 * time.Minute }, []string{"LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL"}, "less than stream total"},
		{"poll max below initial", func(c *Config) { c.PollMax = 500 * time.Millisecond }, []string{"LETTAQ_POLL_MAX", "LETTAQ_POLL_INITIAL"}, "must not be less than"},
		{"multiplier below 1", func(c *Config) { c.PollMultiplier = 0.5 }, []string{"LETTAQ_POLL_MULTIPLIER"}, "at least 1"},
		{"multiplier NaN", func(c *Config) { c.PollMultiplier = math.NaN() }, []string{"LETTAQ_POLL_MULTIPLIER"}, "finite"},
		{"multiplier Inf", func(c *Config) { c.PollMultiplier = math.Inf(1) }, []string{"LETTAQ_POLL_MULTIPLIER"}, "finite"},
		{"jitter negative", func(c *Config) { c.PollJitter = -0.1 }, []string{"LETTAQ_POLL_JITTER"}, "[0,1)"},
		{"jitter one", func(c *Config) { c.PollJitter = 1 }, []string{"LETTAQ_POLL_JITTER"}, "[0,1)"},
		{"jitter NaN", func(c *Config) { c.PollJitter = math.NaN() }, []string{"LETTAQ_POLL_JITTER"}, "[0,1)"},
		{"unknown policy", func(c *Config) { c.ResendPolicy = "always" }, []string{"LETTAQ_RESEND_POLICY"}, `unknown resend policy "always"`},
		{"empty policy", func(c *Config) { c.ResendPolicy = "" }, []string{"LETTAQ_RESEND_POLICY"}, "unknown resend policy"},
		{"request above continuation", func(c *Config) { c.RequestTimeout = 11 * time.Minute }, []string{"LETTAQ_REQUEST_TIMEOUT", "LETTAQ_CONTINUATION_MAX"}, "must not exceed continuation max"},
		{"stop grace above continuation", func(c *Config) { c.StopGrace = 11 * time.Minute }, []string{"LETTAQ_STOP_GRACE", "LETTAQ_CONTINUATION_MAX"}, "must not exceed continuation max"},
		{"sum overflows", func(c *Config) {
			c.ContinuationMax = math.MaxInt64 / 2
			c.StopGrace = 0
		}, []string{"LETTAQ_REQUEST_TIMEOUT", "LETTAQ_CONNECT_TIMEOUT", "LETTAQ_STREAM_TOTAL", "LETTAQ_ADMISSION_GRACE", "LETTAQ_CONTINUATION_MAX", "LETTAQ_DELIVERY_ALLOWANCE", "LETTAQ_SAFETY_MARGIN"}, "add up past"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			rules := ruleErrors(err)
			if len(rules) != 1 {
				t.Fatalf("want exactly one violation, got %d:\n%v", len(rules), err)
			}
			if !slices.Equal(rules[0].Vars, tt.vars) {
				t.Errorf("Vars = %q, want %q", rules[0].Vars, tt.vars)
			}
			if !strings.Contains(rules[0].Rule, tt.rule) {
				t.Errorf("Rule = %q, want it to contain %q", rules[0].Rule, tt.rule)
			}
			for _, v := range tt.vars {
				if !strings.Contains(err.Error(), v) {
					t.Errorf("error %q does not name %s", err, v)
				}
			}
		})
	}
}

func TestValidateAllowsZeroWhereDocumented(t *testing.T) {
	c := Default()
	c.ContentIdleNotice = 0
	c.StopGrace = 0
	c.PollJitter = 0
	c.PollMultiplier = 1
	c.PollMax = c.PollInitial
	c.RequestTimeout = c.ContinuationMax
	c.StopGrace = c.ContinuationMax
	c.ResendPolicy = ResendNever
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

func TestValidateJoinsAllViolations(t *testing.T) {
	c := Default()
	c.ConnectTimeout = -1
	c.StallTimeout = 10 * time.Minute
	c.PollJitter = 2
	c.ResendPolicy = "sometimes"
	err := c.Validate()
	if got := len(ruleErrors(err)); got != 4 {
		t.Fatalf("got %d violations, want 4:\n%v", got, err)
	}
	var re *RuleError
	if !errors.As(err, &re) {
		t.Fatal("errors.As(*RuleError) failed")
	}
}

// ruleErrors flattens an errors.Join tree into its *RuleError leaves.
func ruleErrors(err error) []*RuleError {
	var out []*RuleError
	var walk func(error)
	walk = func(e error) {
		if re, ok := e.(*RuleError); ok {
			out = append(out, re)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

func TestTaskTimeoutDefaults(t *testing.T) {
	c := Default()
	// thread (2 × request 15s) + 2 × (connect + stream + admission + continuation) + delivery + margin
	want := 2*15*time.Second + 2*(30*time.Second+5*time.Minute+30*time.Second+10*time.Minute) + 10*time.Second + 30*time.Second
	if got := c.TaskTimeout(); got != want || got != 33*time.Minute+10*time.Second {
		t.Errorf("TaskTimeout() = %v, want %v", got, want)
	}
	c.ResendPolicy = ResendNever
	if got, want := c.TaskTimeout(), 30*time.Second+30*time.Second+5*time.Minute+30*time.Second+10*time.Minute+40*time.Second; got != want {
		t.Errorf("TaskTimeout() with ResendNever = %v, want %v", got, want)
	}
}

func TestTaskTimeoutRoundsUp(t *testing.T) {
	tiny := Config{ // every phase 1ns except the one under test
		ConnectTimeout: 1, StreamTotal: 1, AdmissionGrace: 1, ContinuationMax: 1,
		DeliveryAllowance: 1, SafetyMargin: 1, ResendPolicy: ResendNever,
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want time.Duration
	}{
		{"1.2s margin rounds up", func(c *Config) { c.SafetyMargin = 1200 * time.Millisecond }, 2 * time.Second},
		{"nanoseconds round up to 1s, never 0", func(c *Config) {}, time.Second},
		{"exact seconds stay", func(c *Config) {
			*c = Config{ConnectTimeout: time.Second, StreamTotal: time.Second, AdmissionGrace: time.Second,
				ContinuationMax: time.Second, DeliveryAllowance: time.Second, SafetyMargin: time.Second, ResendPolicy: ResendNever}
		}, 6 * time.Second},
		{"one ns over a second", func(c *Config) {
			*c = Config{ConnectTimeout: time.Second, StreamTotal: 1, ResendPolicy: ResendNever}
		}, 2 * time.Second},
		{"zero config is 1s, never 0", func(c *Config) { *c = Config{} }, time.Second},
		{"negative phases count as 0", func(c *Config) { *c = Config{ConnectTimeout: -time.Hour, SafetyMargin: 1500 * time.Millisecond} }, 2 * time.Second},
		{"overflow saturates at a whole second", func(c *Config) { c.ContinuationMax = math.MaxInt64 }, math.MaxInt64 / time.Second * time.Second},
		{"resend doubles the attempt", func(c *Config) {
			*c = Config{ConnectTimeout: 400 * time.Millisecond, StreamTotal: 400 * time.Millisecond, ResendPolicy: ResendIfNotAdmitted}
		}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tiny
			tt.mod(&c)
			got := c.TaskTimeout()
			if got != tt.want {
				t.Errorf("TaskTimeout() = %v, want %v", got, tt.want)
			}
			if got%time.Second != 0 || got < time.Second {
				t.Errorf("TaskTimeout() = %v: not a whole number of seconds >= 1s", got)
			}
			// What Asynq stores (truncated seconds) is never below the unrounded budget
			// (unless the sum overflows, which Validate rejects).
			if sum, overflow := c.worstCaseSum(); !overflow && time.Duration(int64(got.Seconds()))*time.Second < sum {
				t.Errorf("Asynq would store %ds, less than the budget %v", int64(got.Seconds()), sum)
			}
		})
	}
}

func TestPhases(t *testing.T) {
	c := Default()
	var names []string
	var sum time.Duration
	for _, p := range c.Terms() {
		names = append(names, p.Name)
		sum += p.Max
		if !strings.HasPrefix(p.Var, "LETTAQ_") {
			t.Errorf("phase %s has Var %q", p.Name, p.Var)
		}
	}
	want := []string{TermThread, TermConnect, TermStream, TermAdmission, TermContinuation,
		TermResendConnect, TermResendStream, TermResendAdmission, TermResendContinuation,
		TermDelivery, TermSafetyMargin}
	if !slices.Equal(names, want) {
		t.Errorf("phases = %q, want %q", names, want)
	}
	if sum != c.TaskTimeout() {
		t.Errorf("sum of phases %v != TaskTimeout %v", sum, c.TaskTimeout())
	}
	c.ResendPolicy = ResendNever
	if n := len(c.Terms()); n != 7 {
		t.Errorf("with ResendNever: %d phases, want 7", n)
	}
}

func TestClamps(t *testing.T) {
	c := Default()
	tests := []struct{ d, remaining, sleep, request time.Duration }{
		{5 * time.Second, 10 * time.Second, 5 * time.Second, 10 * time.Second},
		{5 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second},
		{5 * time.Second, 0, 0, 0},
		{5 * time.Second, -time.Second, 0, 0},
		{-time.Second, 10 * time.Second, 0, 10 * time.Second},
		{time.Minute, time.Hour, time.Minute, 15 * time.Second},
	}
	for _, tt := range tests {
		if got := c.ClampSleep(tt.d, tt.remaining); got != tt.sleep {
			t.Errorf("ClampSleep(%v, %v) = %v, want %v", tt.d, tt.remaining, got, tt.sleep)
		}
		if got := c.ClampRequest(tt.remaining); got != tt.request {
			t.Errorf("ClampRequest(%v) = %v, want %v", tt.remaining, got, tt.request)
		}
	}
}

func TestWarnings(t *testing.T) {
	c := Default()
	c.StallTimeout = 20 * time.Second
	c.ContentIdleNotice = 10 * time.Minute
	w := c.Warnings()
	if len(w) != 2 || !strings.Contains(w[0], "LETTAQ_STALL_TIMEOUT") || !strings.Contains(w[1], "LETTAQ_CONTENT_IDLE_NOTICE") {
		t.Errorf("Warnings() = %q", w)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("warnings are not errors: Validate() = %v", err)
	}
}

func TestLogValue(t *testing.T) {
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "budget", Default())
	out := buf.String()
	for _, want := range []string{"budget.connect=30s", "budget.stall=75s", "budget.stream_total=5m",
		"budget.poll.initial=1s", "budget.poll.multiplier=2", "budget.poll.jitter=0.2", "budget.resume=true",
		"budget.resend=if-not-admitted", "budget.task_timeout=1990s"} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %q:\n%s", want, out)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 75 * time.Second: "75s", 5 * time.Minute: "5m", 2 * time.Hour: "2h",
		1500 * time.Millisecond: "1.5s", 90 * time.Minute: "90m", -time.Second: "-1s",
	} {
		got := FormatDuration(d)
		if got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", got, back, err, d)
		}
	}
}

// The task timeout is computed at every enqueue: it allocates nothing, and Terms fits the
// array it is summed in.
func TestTaskTimeoutAllocatesNothing(t *testing.T) {
	for _, c := range []Config{Default(), func() Config { c := Default(); c.ResendPolicy = ResendIfNotAdmitted; return c }()} {
		if n := len(c.Terms()); n > maxTerms {
			t.Fatalf("%d phases, maxTerms %d", n, maxTerms)
		}
		if a := testing.AllocsPerRun(100, func() { _ = c.TaskTimeout() }); a != 0 {
			t.Errorf("TaskTimeout allocates %.0f times (resend policy %v)", a, c.ResendPolicy)
		}
	}
}

// TestThreadResolutionDoesNotOverflow: a request timeout past half the largest Duration
// (with a continuation max as long, so that the rule between them holds) made
// 2 × RequestTimeout wrap negative: the thread phase then counted as 0 and the configuration
// passed Validate with a task timeout shorter than its request timeout. The phase saturates
// and the configuration is refused naming LETTAQ_REQUEST_TIMEOUT.
func TestThreadResolutionDoesNotOverflow(t *testing.T) {
	for _, d := range []time.Duration{math.MaxInt64/2 + 1, math.MaxInt64 / 3 * 2, math.MaxInt64 - 1} {
		c := Default()
		c.ResendPolicy = ResendNever
		c.RequestTimeout, c.ContinuationMax = d, d
		if got := c.ThreadResolution(); got < d {
			t.Errorf("RequestTimeout %v: ThreadResolution() = %v, want at least the request timeout", d, got)
		}
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "LETTAQ_REQUEST_TIMEOUT") {
			t.Errorf("RequestTimeout %v: Validate() = %v (task timeout %v), want an error naming LETTAQ_REQUEST_TIMEOUT", d, err, c.TaskTimeout())
		}
	}
}
