package budget

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lettaq/lettaq/internal/envvar"
)

// Var describes one environment variable, with the flag that overrides it (Flag): the one
// description lettaq's commands use for theirs too.
type Var = envvar.Var

// setting binds one variable to its Config field. Exactly one of the pointer funcs is set.
type setting struct {
	name string
	help string
	dur  func(*Config) *time.Duration
	flt  func(*Config) *float64
	bln  func(*Config) *bool
	pol  func(*Config) *ResendPolicy
}

// settings is the single table behind Vars, FromEnv and RegisterFlags, in Config's field order.
var settings = []setting{
	{name: "LETTAQ_CONNECT_TIMEOUT",
		help: `wait this long for the first byte of Letta's response to a send ("connect" timeout)`,
		dur:  func(c *Config) *time.Duration { return &c.ConnectTimeout }},
	{name: "LETTAQ_STALL_TIMEOUT",
		help: `abort a stream after this long without any bytes, pings included ("stall" timeout); keep well above Letta's 20s ping interval and below LETTAQ_STREAM_TOTAL`,
		dur:  func(c *Config) *time.Duration { return &c.StallTimeout }},
	{name: "LETTAQ_CONTENT_IDLE_NOTICE",
		help: `after this long with only pings, send a "still thinking" progress event (never aborts; 0 disables)`,
		dur:  func(c *Config) *time.Duration { return &c.ContentIdleNotice }},
	{name: "LETTAQ_STREAM_TOTAL",
		help: `cap on one streaming read, measured from the end of connect ("total" timeout)`,
		dur:  func(c *Config) *time.Duration { return &c.StreamTotal }},
	{name: "LETTAQ_STOP_GRACE",
		help: `after stop_reason, wait this long for the stream body to close`,
		dur:  func(c *Config) *time.Duration { return &c.StopGrace }},
	{name: "LETTAQ_ADMISSION_GRACE",
		help: `after a lost stream, look this long for the turn's otid in the agent's history before concluding the message was never admitted`,
		dur:  func(c *Config) *time.Duration { return &c.AdmissionGrace }},
	{name: "LETTAQ_CONTINUATION_MAX",
		help: `how long one attempt may follow a run (resume or poll) after its stream is lost`,
		dur:  func(c *Config) *time.Duration { return &c.ContinuationMax }},
	{name: "LETTAQ_POLL_INITIAL",
		help: `first delay between lookups or polls`,
		dur:  func(c *Config) *time.Duration { return &c.PollInitial }},
	{name: "LETTAQ_POLL_MAX",
		help: `largest delay between lookups or polls`,
		dur:  func(c *Config) *time.Duration { return &c.PollMax }},
	{name: "LETTAQ_POLL_MULTIPLIER",
		help: `growth of the delay per try (at least 1)`,
		flt:  func(c *Config) *float64 { return &c.PollMultiplier }},
	{name: "LETTAQ_POLL_JITTER",
		help: `random spread of each delay, as a fraction in [0,1)`,
		flt:  func(c *Config) *float64 { return &c.PollJitter }},
	{name: "LETTAQ_REQUEST_TIMEOUT",
		help: `timeout of each HTTP request made by lookups and polls (at most LETTAQ_CONTINUATION_MAX)`,
		dur:  func(c *Config) *time.Duration { return &c.RequestTimeout }},
	{name: "LETTAQ_RESUME",
		help: `resume a background run's stream before falling back to polling`,
		bln:  func(c *Config) *bool { return &c.Resume }},
	{name: "LETTAQ_BACKGROUND",
		help: `send turns with background=true (resumable; needs a Letta server with Redis)`,
		bln:  func(c *Config) *bool { return &c.Background }},
	{name: "LETTAQ_RESEND_POLICY",
		help: `whether a lost turn may be sent once more, with the same otid: "never" or "if-not-admitted" (only when its otid is not in the agent's history)`,
		pol:  func(c *Config) *ResendPolicy { return &c.ResendPolicy }},
	{name: "LETTAQ_DELIVERY_ALLOWANCE",
		help: `time reserved for writing the reply events and the task result`,
		dur:  func(c *Config) *time.Duration { return &c.DeliveryAllowance }},
	{name: "LETTAQ_SAFETY_MARGIN",
		help: `slack added to the task timeout on top of the worst case, so the handler returns before Asynq's deadline`,
		dur:  func(c *Config) *time.Duration { return &c.SafetyMargin }},
}

// format writes s's value in c the way it would be written in the environment.
func (s setting) format(c *Config) string {
	switch {
	case s.dur != nil:
		return FormatDuration(*s.dur(c))
	case s.flt != nil:
		return strconv.FormatFloat(*s.flt(c), 'g', -1, 64)
	case s.bln != nil:
		return strconv.FormatBool(*s.bln(c))
	default:
		return string(*s.pol(c))
	}
}

// parse sets s's field in c from raw (already trimmed and non-empty).
func (s setting) parse(c *Config, raw string) error {
	switch {
	case s.dur != nil:
		d, err := envvar.ParseDuration(raw)
		if err != nil {
			return err
		}
		*s.dur(c) = d
	case s.flt != nil:
		f, err := envvar.ParseFloat(raw)
		if err != nil {
			return err
		}
		*s.flt(c) = f
	case s.bln != nil:
		b, err := envvar.ParseBool(raw)
		if err != nil {
			return err
		}
		*s.bln(c) = b
	default:
		p := ResendPolicy(strings.ToLower(raw))
		if !p.Valid() {
			return fmt.Errorf("unknown resend policy (want %q or %q)", ResendNever, ResendIfNotAdmitted)
		}
		*s.pol(c) = p
	}
	return nil
}

// Vars lists every environment variable Config reads, in a stable order (Config's field
// order), with its default and a one-line help.
func Vars() []Var {
	d := Default()
	vs := make([]Var, len(settings))
	for i, s := range settings {
		vs[i] = Var{Name: s.name, Flag: envvar.FlagName(s.name), Default: s.format(&d), Help: s.help,
			Bool: s.bln != nil, Budget: true}
	}
	return vs
}

// FromEnv starts from Default, overrides every variable that getenv returns non-empty
// (surrounding spaces ignored), then validates. Durations use Go syntax ("75s", "1m30s",
// "500ms"); booleans accept true/false, 1/0, yes/no, on/off; the policy is "never" or
// "if-not-admitted". On error it returns the zero Config and every problem at once, joined:
// a *ParseError for each value that does not parse (naming variable and value) and a
// *RuleError for each broken rule of the result (see Validate).
//
// Pass os.Getenv in production and a map's lookup in tests.
func FromEnv(getenv func(string) string) (Config, error) {
	c := Default()
	var errs []error
	for _, s := range settings {
		raw := strings.TrimSpace(getenv(s.name))
		if raw == "" {
			continue
		}
		if err := s.parse(&c, raw); err != nil {
			errs = append(errs, &ParseError{Var: s.name, Value: raw, Err: err})
		}
	}
	if err := c.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return c, nil
}

// RegisterFlags defines one flag per variable on fs (LETTAQ_STALL_TIMEOUT → --stall-timeout),
// each parsing into the matching field of c and showing c's current value as its default.
// Call it after FromEnv so the precedence is: flag, then environment, then default. Call
// Validate after fs.Parse: flags are checked only for syntax.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	for _, s := range settings {
		name, usage := envvar.FlagName(s.name), s.help+" (env "+s.name+")"
		switch {
		case s.dur != nil:
			p := s.dur(c)
			fs.DurationVar(p, name, *p, usage)
		case s.flt != nil:
			p := s.flt(c)
			fs.Float64Var(p, name, *p, usage)
		case s.bln != nil:
			p := s.bln(c)
			fs.BoolVar(p, name, *p, usage)
		default:
			fs.Var((*policyValue)(s.pol(c)), name, usage)
		}
	}
}

// policyValue is a flag.Value for ResendPolicy that rejects unknown policies at parse time.
type policyValue ResendPolicy

func (p *policyValue) String() string {
	if p == nil {
		return ""
	}
	return string(*p)
}

func (p *policyValue) Set(s string) error {
	v := ResendPolicy(strings.ToLower(strings.TrimSpace(s)))
	if !v.Valid() {
		return fmt.Errorf("unknown resend policy %q (want %q or %q)", s, ResendNever, ResendIfNotAdmitted)
	}
	*p = policyValue(v)
	return nil
}
