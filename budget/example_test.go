package budget_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/lettaq/lettaq/budget"
)

// The task timeout of the defaults: connect 30s + stream 5m + admission 30s + continuation
// 10m, twice because the default policy allows one resend, + delivery 10s + margin 30s.
func ExampleConfig_TaskTimeout() {
	cfg := budget.Default()
	fmt.Println(cfg.TaskTimeout())

	cfg.ResendPolicy = budget.ResendNever
	fmt.Println(cfg.TaskTimeout())

	cfg.SafetyMargin = 1200 * time.Millisecond // rounded up to whole seconds for Asynq
	fmt.Println(cfg.TaskTimeout())
	// Output:
	// 33m10s
	// 17m10s
	// 16m42s
}

func ExampleConfig_Terms() {
	cfg := budget.Default()
	cfg.ResendPolicy = budget.ResendNever
	for _, p := range cfg.Terms() {
		fmt.Printf("%-14s %6v  %s\n", p.Name, p.Max, p.Var)
	}
	fmt.Printf("%-14s %6v\n", "task timeout", cfg.TaskTimeout())
	// Output:
	// thread            30s  LETTAQ_REQUEST_TIMEOUT
	// connect           30s  LETTAQ_CONNECT_TIMEOUT
	// stream           5m0s  LETTAQ_STREAM_TOTAL
	// admission         30s  LETTAQ_ADMISSION_GRACE
	// continuation    10m0s  LETTAQ_CONTINUATION_MAX
	// delivery          10s  LETTAQ_DELIVERY_ALLOWANCE
	// safety-margin     30s  LETTAQ_SAFETY_MARGIN
	// task timeout   17m10s
}

func ExampleFromEnv() {
	env := map[string]string{
		"LETTAQ_STALL_TIMEOUT": "10m", // not below LETTAQ_STREAM_TOTAL (5m)
		"LETTAQ_POLL_JITTER":   "lots",
	}
	_, err := budget.FromEnv(func(k string) string { return env[k] })
	fmt.Println(err)

	var pe *budget.ParseError
	fmt.Println(errors.As(err, &pe), pe.Var)
	// Output:
	// LETTAQ_POLL_JITTER="lots": invalid syntax
	// LETTAQ_STALL_TIMEOUT, LETTAQ_STREAM_TOTAL: stall timeout (10m0s) must be less than stream total (5m0s)
	// true LETTAQ_POLL_JITTER
}

// Environment first, then flags: the flags' defaults are the values read from the
// environment.
func ExampleConfig_RegisterFlags() {
	cfg, err := budget.FromEnv(os.Getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"--stall-timeout=90s", "--resend-policy=never"}); err != nil {
		fmt.Println(err)
		return
	}
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.StallTimeout, cfg.ResendPolicy, cfg.TaskTimeout())
}

// The worst-case schedule of one attempt, as the property test checks it.
func ExampleConfig_Simulate() {
	cfg := budget.Default()
	tr := cfg.Simulate(nil) // nil: every backoff sleep at its jittered maximum
	fmt.Println(tr.Total, "of", cfg.TaskTimeout()-cfg.SafetyMargin)
	fmt.Println(tr.TermTotal(budget.TermAdmission), tr.TermTotal(budget.TermContinuation))
	// Output:
	// 32m40s of 32m40s
	// 30s 10m0s
}

// How the continuation follows a run: every request and sleep is bounded by what remains
// of the window, so the follow cannot outlast ContinuationMax.
func ExampleLoop() {
	cfg := budget.Default()
	ctx := context.Background()
	getRun := func(ctx context.Context) (ended bool, err error) { return true, nil } // stands in for the client

	l := cfg.FollowLoop(time.Now())
	for !l.Done() {
		rctx, cancel := l.RequestContext(ctx)
		ended, err := getRun(rctx)
		cancel()
		if err == nil && ended {
			fmt.Println("run ended")
			return
		}
		if err := l.Sleep(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println("gave up after", cfg.ContinuationMax)
	// Output: run ended
}

func ExampleVars() {
	for _, v := range budget.Vars()[:3] {
		fmt.Printf("%s (--%s, default %s)\n", v.Name, v.Flag, v.Default)
	}
	// Output:
	// LETTAQ_CONNECT_TIMEOUT (--connect-timeout, default 30s)
	// LETTAQ_STALL_TIMEOUT (--stall-timeout, default 75s)
	// LETTAQ_CONTENT_IDLE_NOTICE (--content-idle-notice, default 10s)
}
