package budget

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnvUnsetIsDefault(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c != Default() {
		t.Errorf("FromEnv(empty) = %+v, want Default()", c)
	}
	// Blank values count as unset.
	c, err = FromEnv(env(map[string]string{"LETTAQ_STALL_TIMEOUT": "  ", "LETTAQ_RESUME": ""}))
	if err != nil || c != Default() {
		t.Errorf("FromEnv(blank) = %+v, %v; want Default()", c, err)
	}
}

func TestFromEnvParsesEveryVariable(t *testing.T) {
	m := map[string]string{
		"LETTAQ_CONNECT_TIMEOUT":     "20s",
		"LETTAQ_STALL_TIMEOUT":       "90s",
		"LETTAQ_CONTENT_IDLE_NOTICE": "0",
		"LETTAQ_STREAM_TOTAL":        "4m30s",
		"LETTAQ_STOP_GRACE":          "1500ms",
		"LETTAQ_ADMISSION_GRACE":     "45s",
		"LETTAQ_CONTINUATION_MAX":    "20m",
		"LETTAQ_POLL_INITIAL":        "250ms",
		"LETTAQ_POLL_MAX":            "10s",
		"LETTAQ_POLL_MULTIPLIER":     "1.5",
		"LETTAQ_POLL_JITTER":         " 0.1 ",
		"LETTAQ_REQUEST_TIMEOUT":     "5s",
		"LETTAQ_RESUME":              "false",
		"LETTAQ_BACKGROUND":          "yes",
		"LETTAQ_RESEND_POLICY":       "Never",
		"LETTAQ_DELIVERY_ALLOWANCE":  "3s",
		"LETTAQ_SAFETY_MARGIN":       "1m",
	}
	if len(m) != len(Vars()) {
		t.Fatalf("test covers %d variables, Vars() has %d", len(m), len(Vars()))
	}
	got, err := FromEnv(env(m))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ConnectTimeout: 20 * time.Second, StallTimeout: 90 * time.Second, ContentIdleNotice: 0,
		StreamTotal: 270 * time.Second, StopGrace: 1500 * time.Millisecond, AdmissionGrace: 45 * time.Second,
		ContinuationMax: 20 * time.Minute, PollInitial: 250 * time.Millisecond, PollMax: 10 * time.Second,
		PollMultiplier: 1.5, PollJitter: 0.1, RequestTimeout: 5 * time.Second, Resume: false, Background: true,
		ResendPolicy: ResendNever, DeliveryAllowance: 3 * time.Second, SafetyMargin: time.Minute,
	}
	if got != want {
		t.Errorf("FromEnv =\n%+v\nwant\n%+v", got, want)
	}
	// Each variable on its own changes exactly its own field.
	def := reflect.ValueOf(Default())
	for name, val := range m {
		c, err := FromEnv(env(map[string]string{name: val}))
		if err != nil {
			t.Errorf("%s=%q alone: %v", name, val, err)
			continue
		}
		cv, changed := reflect.ValueOf(c), 0
		for i := range cv.NumField() {
			if cv.Field(i).Interface() != def.Field(i).Interface() {
				changed++
			}
		}
		if changed != 1 {
			t.Errorf("%s=%q changed %d fields, want 1", name, val, changed)
		}
	}
}

func TestFromEnvBooleans(t *testing.T) {
	for raw, want := range map[string]bool{"1": true, "true": true, "TRUE": true, "on": true, "yes": true, "t": true,
		"0": false, "false": false, "off": false, "no": false, "F": false} {
		c, err := FromEnv(env(map[string]string{"LETTAQ_BACKGROUND": raw}))
		if err != nil || c.Background != want {
			t.Errorf("LETTAQ_BACKGROUND=%q → %v, %v; want %v", raw, c.Background, err, want)
		}
	}
}

func TestFromEnvBadValues(t *testing.T) {
	tests := []struct {
		name, val, reason string
	}{
		{"LETTAQ_STALL_TIMEOUT", "75", "with a unit"},
		{"LETTAQ_CONNECT_TIMEOUT", "soon", "write a duration with a unit, e.g. 500ms"},
		{"LETTAQ_POLL_MULTIPLIER", "double", "invalid syntax"},
		{"LETTAQ_POLL_JITTER", "1e999", "out of range"},
		{"LETTAQ_RESUME", "maybe", "not a boolean"},
		{"LETTAQ_RESEND_POLICY", "always", "unknown resend policy"},
		{"LETTAQ_SAFETY_MARGIN", "-", "write a duration with a unit, e.g. 500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromEnv(env(map[string]string{tt.name: tt.val}))
			if err == nil {
				t.Fatalf("FromEnv(%s=%q) = nil error", tt.name, tt.val)
			}
			if c != (Config{}) {
				t.Errorf("on error FromEnv returned %+v, want the zero Config", c)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Var != tt.name || pe.Value != tt.val {
				t.Fatalf("want *ParseError for %s=%q, got %v", tt.name, tt.val, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.name) || !strings.Contains(msg, `"`+tt.val+`"`) || !strings.Contains(msg, tt.reason) {
				t.Errorf("error %q should name %s, the value %q and %q", msg, tt.name, tt.val, tt.reason)
			}
		})
	}
}

func TestFromEnvRuleViolations(t *testing.T) {
	_, err := FromEnv(env(map[string]string{"LETTAQ_STALL_TIMEOUT": "10m", "LETTAQ_POLL_JITTER": "1"}))
	if got := len(ruleErrors(err)); got != 2 {
		t.Fatalf("got %d rule violations, want 2: %v", got, err)
	}
	for _, v := range []string{"LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL", "LETTAQ_POLL_JITTER"} {
		if !strings.Contains(err.Error(), v) {
			t.Errorf("error does not name %s: %v", v, err)
		}
	}
}

func TestFromEnvJoinsAllErrors(t *testing.T) {
	_, err := FromEnv(env(map[string]string{
		"LETTAQ_CONNECT_TIMEOUT":  "x",  // parse
		"LETTAQ_POLL_MULTIPLIER":  "y",  // parse
		"LETTAQ_RESEND_POLICY":    "z",  // parse
		"LETTAQ_STALL_TIMEOUT":    "6m", // rule: stall >= total
		"LETTAQ_REQUEST_TIMEOUT":  "0s", // rule: zero
		"LETTAQ_CONTINUATION_MAX": "1m", // fine on its own
	}))
	if err == nil {
		t.Fatal("want errors")
	}
	var parses []string
	var walk func(error)
	walk = func(e error) {
		if pe, ok := e.(*ParseError); ok {
			parses = append(parses, pe.Var)
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	if len(parses) != 3 {
		t.Errorf("parse errors for %q, want 3", parses)
	}
	if n := len(ruleErrors(err)); n != 2 {
		t.Errorf("%d rule errors, want 2:\n%v", n, err)
	}
}

func TestVarsComplete(t *testing.T) {
	vs := Vars()
	typ := reflect.TypeFor[Config]()
	if len(vs) != typ.NumField() {
		t.Fatalf("Vars() has %d entries, Config has %d fields", len(vs), typ.NumField())
	}
	// Every field is bound to exactly one variable, in field order.
	var c Config
	base := reflect.ValueOf(&c).Elem()
	for i, s := range settings {
		var addr any
		switch {
		case s.dur != nil:
			addr = s.dur(&c)
		case s.flt != nil:
			addr = s.flt(&c)
		case s.bln != nil:
			addr = s.bln(&c)
		default:
			addr = s.pol(&c)
		}
		if got := base.Field(i).Addr().Interface(); got != addr {
			t.Errorf("setting %d (%s) is not bound to field %s", i, s.name, typ.Field(i).Name)
		}
	}
	seen := map[string]bool{}
	d := Default()
	for _, v := range vs {
		if seen[v.Name] || !strings.HasPrefix(v.Name, "LETTAQ_") || v.Help == "" || v.Default == "" {
			t.Errorf("bad Var %+v", v)
		}
		seen[v.Name] = true
		// The default, written into the environment, reproduces the default.
		c, err := FromEnv(env(map[string]string{v.Name: v.Default}))
		if err != nil || c != d {
			t.Errorf("%s=%q (its own default) → %v", v.Name, v.Default, err)
		}
	}
	want := map[string]string{"LETTAQ_STALL_TIMEOUT": "75s", "LETTAQ_STREAM_TOTAL": "5m", "LETTAQ_POLL_JITTER": "0.2",
		"LETTAQ_RESUME": "true", "LETTAQ_BACKGROUND": "false", "LETTAQ_RESEND_POLICY": "if-not-admitted", "LETTAQ_CONTENT_IDLE_NOTICE": "10s"}
	for _, v := range vs {
		if w, ok := want[v.Name]; ok && v.Default != w {
			t.Errorf("%s default %q, want %q", v.Name, v.Default, w)
		}
	}
	for _, v := range vs {
		if v.Name == "LETTAQ_STALL_TIMEOUT" && v.Flag != "stall-timeout" {
			t.Errorf("LETTAQ_STALL_TIMEOUT's flag = %q, want stall-timeout", v.Flag)
		}
	}
}

func TestRegisterFlags(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"LETTAQ_STALL_TIMEOUT": "90s", "LETTAQ_POLL_MAX": "20s", "LETTAQ_BACKGROUND": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	c.RegisterFlags(fs)

	for _, v := range Vars() {
		if fs.Lookup(v.Flag) == nil {
			t.Errorf("no flag --%s for %s", v.Flag, v.Name)
		}
	}
	if err := fs.Parse([]string{"--stall-timeout=100s", "--poll-multiplier", "3", "--resume=false", "--resend-policy=never"}); err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.StallTimeout = 100 * time.Second // flag beats env
	want.PollMax = 20 * time.Second       // env stays where no flag is given
	want.Background = true
	want.PollMultiplier = 3
	want.Resume = false
	want.ResendPolicy = ResendNever
	if c != want {
		t.Errorf("after flags:\n%+v\nwant\n%+v", c, want)
	}
}

func TestRegisterFlagsRejectsBadValues(t *testing.T) {
	for _, arg := range []string{"--resend-policy=always", "--stall-timeout=75", "--poll-jitter=lots", "--resume=maybe"} {
		c := Default()
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		c.RegisterFlags(fs)
		if err := fs.Parse([]string{arg}); err == nil {
			t.Errorf("Parse(%s) = nil, want error", arg)
		}
	}
}

func TestRegisterFlagsHelpListsDefaults(t *testing.T) {
	c, err := FromEnv(env(map[string]string{"LETTAQ_STALL_TIMEOUT": "90s"}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(&out)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, want := range []string{
		"-stall-timeout duration", "(default 1m30s)", // the env value is the shown default
		"-stream-total duration", "(default 5m0s)",
		"-connect-timeout", "(default 30s)",
		"-poll-jitter float", "(default 0.2)",
		"-poll-multiplier float", "(default 2)",
		"-resend-policy value", "(default if-not-admitted)",
		"-resume", "(default true)",
		"-background",
		"(env LETTAQ_STALL_TIMEOUT)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	for _, v := range Vars() {
		if !strings.Contains(help, "-"+v.Flag) || !strings.Contains(help, "(env "+v.Name+")") {
			t.Errorf("help lacks --%s / %s", v.Flag, v.Name)
		}
	}
}
