package budget

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// logDur draws a duration log-uniformly from [lo, hi], at nanosecond resolution, so that
// small and large values, and values that are not whole seconds, are all common.
func logDur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	return time.Duration(math.Exp(l + rng.Float64()*(h-l)))
}

// randomConfig draws a configuration from sane ranges; it may be invalid.
func randomConfig(rng *rand.Rand) Config {
	c := Config{
		ConnectTimeout:    logDur(rng, 10*time.Millisecond, 2*time.Minute),
		StallTimeout:      logDur(rng, 10*time.Millisecond, 10*time.Minute),
		StreamTotal:       logDur(rng, 100*time.Millisecond, 30*time.Minute),
		AdmissionGrace:    logDur(rng, time.Millisecond, 5*time.Minute),
		ContinuationMax:   logDur(rng, 100*time.Millisecond, 20*time.Minute),
		PollInitial:       logDur(rng, time.Millisecond, 10*time.Second),
		PollMax:           logDur(rng, time.Millisecond, time.Minute),
		PollMultiplier:    1 + 3*rng.Float64(),
		PollJitter:        rng.Float64(),
		RequestTimeout:    logDur(rng, 100*time.Millisecond, time.Minute),
		Resume:            rng.IntN(2) == 0,
		Background:        rng.IntN(2) == 0,
		ResendPolicy:      []ResendPolicy{ResendNever, ResendIfNotAdmitted}[rng.IntN(2)],
		DeliveryAllowance: logDur(rng, time.Millisecond, time.Minute),
		SafetyMargin:      logDur(rng, time.Millisecond, 2*time.Minute),
	}
	if rng.IntN(4) > 0 {
		c.ContentIdleNotice = logDur(rng, time.Millisecond, time.Minute)
	}
	if rng.IntN(4) > 0 {
		c.StopGrace = logDur(rng, time.Millisecond, 10*time.Second)
	}
	if rng.IntN(5) == 0 {
		c.PollMultiplier = 1
	}
	if rng.IntN(5) == 0 {
		c.PollJitter = 0
	}
	if rng.IntN(10) == 0 {
		c.RequestTimeout = c.ContinuationMax // the largest allowed
	}
	return c
}

// validConfigs returns n random valid configurations (invalid draws are rejected by
// Validate), always starting with the defaults.
func validConfigs(t *testing.T, seed uint64, n int) []Config {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cs := []Config{Default()}
	rejected := 0
	for len(cs) < n {
		c := randomConfig(rng)
		if c.Validate() != nil {
			rejected++
			continue
		}
		cs = append(cs, c)
	}
	t.Logf("%d valid configurations (%d invalid draws rejected)", len(cs), rejected)
	return cs
}

func propertyCount() int {
	if testing.Short() {
		return 500
	}
	return 3000
}

// TestWorstCaseFitsTaskTimeout is the budget's central property: for every valid
// configuration, the worst-case schedule of one attempt (every request at its timeout,
// every sleep at its jittered maximum, admission search and follow running to their caps,
// the resend path when the policy allows it) ends within TaskTimeout − SafetyMargin.
func TestWorstCaseFitsTaskTimeout(t *testing.T) {
	cs := validConfigs(t, 1, propertyCount())
	drawRNG := rand.New(rand.NewPCG(2, 3))
	draws := map[string]func() float64{
		"worst":   nil,
		"uniform": drawRNG.Float64,
		"zero":    func() float64 { return 0 }, // shortest sleeps: the most requests
	}
	for i, c := range cs {
		tt := c.TaskTimeout()
		if tt%time.Second != 0 || tt < time.Second {
			t.Fatalf("config %d: TaskTimeout %v is not a whole number of seconds >= 1s\n%+v", i, tt, c)
		}
		budget := tt - c.SafetyMargin
		// A stream that ends with stop_reason spends StopGrace instead of admission and
		// continuation, also after a resend.
		stop := c.ConnectTimeout + c.StreamTotal + c.StopGrace + c.DeliveryAllowance
		if c.ResendPolicy.AllowsResend() {
			stop += c.ConnectTimeout + c.StreamTotal + c.AdmissionGrace + c.ContinuationMax
		}
		if stop > budget {
			t.Fatalf("config %d: stop-grace path %v > budget %v\n%+v", i, stop, budget, c)
		}
		for name, r := range draws {
			for _, p := range Paths() {
				tr := c.SimulatePath(p, r)
				if tr.Total > budget {
					t.Fatalf("config %d, path %s, %s draws: worst case %v > TaskTimeout %v − SafetyMargin %v\n%+v",
						i, p, name, tr.Total, tt, c.SafetyMargin, c)
				}
				checkTrace(t, c, tr)
			}
			tr := c.Simulate(r)
			if r == nil {
				// The worst case uses every phase to its cap, exactly: the property is tight,
				// so the test would notice a phase the formula forgot.
				var want time.Duration
				for _, p := range c.Terms() {
					if p.Name != TermSafetyMargin {
						want += p.Max
					}
				}
				if tr.Total != want {
					t.Fatalf("config %d: worst case %v, want exactly the sum of phases %v\n%+v", i, tr.Total, want, c)
				}
			}
		}
	}
}

// checkTrace checks a trace's shape: contiguous steps, each phase within its cap, each
// request within RequestTimeout and each sleep within PollMax.
func checkTrace(t *testing.T, c Config, tr Trace) {
	t.Helper()
	var at time.Duration
	for _, s := range tr.Steps {
		if s.At != at || s.Length <= 0 {
			t.Fatalf("step %+v: want At=%v and a positive length", s, at)
		}
		at += s.Length
		switch s.Kind {
		case StepRequest:
			if s.Length > c.RequestTimeout {
				t.Fatalf("request step %+v longer than RequestTimeout %v", s, c.RequestTimeout)
			}
		case StepSleep:
			if s.Length > c.PollMax {
				t.Fatalf("sleep step %+v longer than PollMax %v", s, c.PollMax)
			}
		}
	}
	if at != tr.Total {
		t.Fatalf("steps end at %v, Total %v", at, tr.Total)
	}
	for _, p := range c.Terms() {
		if got := tr.TermTotal(p.Name); got > p.Max {
			t.Fatalf("phase %s took %v > its cap %v (%s)\n%+v", p.Name, got, p.Max, p.Var, c)
		}
	}
	if !c.ResendPolicy.AllowsResend() && tr.TermTotal(TermResendConnect) != 0 {
		t.Fatalf("resend steps under policy %q", c.ResendPolicy)
	}
}

// TestWithoutClampWouldOverrun shows that the property above can fail: the same schedule,
// with requests and sleeps not clamped to what remains of their phase, overruns the budget,
// for the defaults and for many random configurations. The clamp is what keeps it in budget.
func TestWithoutClampWouldOverrun(t *testing.T) {
	d := Default()
	if got, budget := d.simulate(PathLostStream, nil, true).Total, d.TaskTimeout()-d.SafetyMargin; got <= budget {
		t.Fatalf("defaults unclamped: %v, expected it to overrun %v", got, budget)
	} else {
		t.Logf("defaults: unclamped %v overruns the budget %v by %v; clamped %v", got, budget, got-budget, d.WorstCase(nil))
	}
	overruns := 0
	cs := validConfigs(t, 4, propertyCount()/3)
	for _, c := range cs {
		clamped, unclamped := c.WorstCase(nil), c.simulate(PathLostStream, nil, true).Total
		if unclamped < clamped {
			t.Fatalf("unclamped %v < clamped %v\n%+v", unclamped, clamped, c)
		}
		if unclamped > c.TaskTimeout()-c.SafetyMargin {
			overruns++
		}
	}
	if overruns < len(cs)/4 {
		t.Errorf("only %d of %d configurations overrun without the clamp", overruns, len(cs))
	}
	t.Logf("%d of %d configurations overrun without the clamp", overruns, len(cs))
}

// TestResendNeedsItsPhases shows the resend term of the formula matters: under
// ResendIfNotAdmitted the worst case exceeds the budget that ResendNever would give.
func TestResendNeedsItsPhases(t *testing.T) {
	for _, c := range validConfigs(t, 5, propertyCount()/3) {
		if !c.ResendPolicy.AllowsResend() || c.ConnectTimeout+c.StreamTotal+c.AdmissionGrace+c.ContinuationMax <= time.Second {
			continue
		}
		never := c
		never.ResendPolicy = ResendNever
		if got, budget := c.WorstCase(nil), never.TaskTimeout()-never.SafetyMargin; got <= budget {
			t.Fatalf("with resend %v fits the no-resend budget %v: the resend phases are not exercised\n%+v", got, budget, c)
		}
	}
}

func TestSimulateDefaults(t *testing.T) {
	c := Default()
	tr := c.Simulate(nil)
	if want := 32*time.Minute + 40*time.Second; tr.Total != want {
		t.Errorf("Simulate(nil).Total = %v, want %v", tr.Total, want)
	}
	for phase, want := range map[string]time.Duration{
		TermConnect: 30 * time.Second, TermStream: 5 * time.Minute, TermAdmission: 30 * time.Second,
		TermContinuation: 10 * time.Minute, TermResendContinuation: 10 * time.Minute, TermDelivery: 10 * time.Second,
		TermSafetyMargin: 0,
	} {
		if got := tr.TermTotal(phase); got != want {
			t.Errorf("TermTotal(%s) = %v, want %v", phase, got, want)
		}
	}
	// The admission search of the defaults: 15s request, 1.2s sleep, then a request clamped
	// to the 13.8s that remain.
	var adm []Step
	for _, s := range tr.Steps {
		if s.Term == TermAdmission {
			adm = append(adm, s)
		}
	}
	want := []Step{
		// after the thread (30s), connect (30s) and stream (5m)
		{TermAdmission, StepRequest, 6 * time.Minute, 15 * time.Second},
		{TermAdmission, StepSleep, 6*time.Minute + 15*time.Second, 1200 * time.Millisecond},
		{TermAdmission, StepRequest, 6*time.Minute + 16*time.Second + 200*time.Millisecond, 13*time.Second + 800*time.Millisecond},
	}
	if len(adm) != len(want) {
		t.Fatalf("admission steps %+v, want %+v", adm, want)
	}
	for i := range want {
		if d := adm[i].Length - want[i].Length; adm[i].Kind != want[i].Kind || adm[i].At != want[i].At || d < -2 || d > 2 {
			t.Errorf("admission step %d = %+v, want %+v", i, adm[i], want[i])
		}
	}
	// The follow begins as the code does: a GET of the run, then a resume (Resume defaults
	// to true) bounded by connect + total.
	var fol []Step
	for _, s := range tr.Steps {
		if s.Term == TermContinuation {
			fol = append(fol, s)
		}
	}
	if len(fol) < 2 || fol[0].Kind != StepRequest || fol[0].Length != 15*time.Second ||
		fol[1].Kind != StepResume || fol[1].Length != 5*time.Minute+30*time.Second {
		t.Errorf("first follow steps %+v, want a 15s request then a 5m30s resume", fol[:min(2, len(fol))])
	}
	c.Resume = false
	for _, s := range c.Simulate(nil).Steps {
		if s.Kind == StepResume {
			t.Fatalf("resume step with Resume=false: %+v", s)
		}
	}
}

func TestSimulateTerminatesOnInvalidConfig(t *testing.T) {
	for _, c := range []Config{{}, {AdmissionGrace: time.Second, ContinuationMax: time.Second}, {
		AdmissionGrace: time.Minute, ContinuationMax: time.Minute, RequestTimeout: -1, PollInitial: -1, PollMax: -1,
	}} {
		done := make(chan Trace)
		go func() { done <- c.Simulate(nil) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Simulate(%+v) does not terminate", c)
		}
	}
}

// fakeClock is a manual clock for Loop tests.
type fakeClock struct{ t time.Time }

func (f *fakeClock) Now() time.Time          { return f.t }
func (f *fakeClock) Advance(d time.Duration) { f.t = f.t.Add(d) }

func TestLoopClampsToWindow(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := Default() // RequestTimeout 15s, backoff 1s×2 up to 15s, jitter 0.2
	l := c.AdmissionLoop(clk.Now())
	l.Now, l.Rand = clk.Now, WorstDraw
	if l.Term != TermAdmission || l.Remaining() != 30*time.Second || l.Done() {
		t.Fatalf("new loop: phase %q, remaining %v, done %v", l.Term, l.Remaining(), l.Done())
	}
	if got := l.NextRequest(); got != 15*time.Second {
		t.Errorf("NextRequest = %v, want 15s", got)
	}
	clk.Advance(25 * time.Second)
	if got := l.NextRequest(); got != 5*time.Second {
		t.Errorf("NextRequest with 5s left = %v, want 5s", got)
	}
	if got := l.NextSleep(); got != 1200*time.Millisecond || l.Attempt() != 1 {
		t.Errorf("NextSleep = %v (attempt %d), want 1.2s (1)", got, l.Attempt())
	}
	for range 3 {
		l.NextSleep()
	}
	if got := l.NextSleep(); got != 5*time.Second { // Delay(4) = 15s, clamped to the 5s left
		t.Errorf("NextSleep = %v, want clamped to 5s", got)
	}
	l.ResetBackoff()
	if l.Attempt() != 0 || l.NextSleep() != 1200*time.Millisecond {
		t.Error("ResetBackoff did not start over")
	}
	if got := l.Clamp(time.Hour); got != 5*time.Second {
		t.Errorf("Clamp(1h) = %v, want 5s", got)
	}
	clk.Advance(6 * time.Second)
	if !l.Done() || l.Remaining() != 0 || l.NextRequest() != 0 || l.NextSleep() != 0 || l.Clamp(time.Second) != 0 {
		t.Error("after the window: want Done, and zero for every bound")
	}

	f := c.FollowLoop(clk.Now())
	f.Now = clk.Now
	if f.Term != TermContinuation || f.Remaining() != 10*time.Minute {
		t.Errorf("FollowLoop: phase %q, remaining %v", f.Term, f.Remaining())
	}
}

func TestLoopRealClock(t *testing.T) {
	c := Default()
	c.PollInitial, c.PollMax, c.RequestTimeout = 5*time.Millisecond, 5*time.Millisecond, time.Second
	l := c.FollowLoop(time.Now())
	l.Rand = nil // math/rand/v2
	l.Deadline = time.Now().Add(200 * time.Millisecond)

	rctx, cancel := l.RequestContext(context.Background())
	dl, ok := rctx.Deadline()
	cancel()
	if !ok || time.Until(dl) > 200*time.Millisecond {
		t.Errorf("RequestContext deadline %v is not clamped to the window", dl)
	}

	start := time.Now()
	if err := l.Sleep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 4*time.Millisecond {
		t.Errorf("Sleep returned after %v, want about 5ms", el)
	}

	ctx, cancelCtx := context.WithCancel(context.Background())
	cancelCtx()
	l.Backoff = Backoff{Initial: time.Hour, Max: time.Hour, Multiplier: 1}
	if err := l.Sleep(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(cancelled) = %v, want context.Canceled", err)
	}

	for !l.Done() {
		if err := l.Sleep(context.Background()); err != nil { // each sleep ends at the window
			t.Fatal(err)
		}
	}
	if time.Now().Before(l.Deadline) {
		t.Error("Done before the deadline")
	}
	if err := l.Sleep(context.Background()); err != nil {
		t.Errorf("Sleep after the window = %v, want nil at once", err)
	}
	rctx, cancel = l.RequestContext(context.Background())
	defer cancel()
	if rctx.Err() == nil {
		t.Error("RequestContext after the window should be done already")
	}
}

func TestLoopSleepAtLeast(t *testing.T) {
	c := Default()
	c.PollInitial, c.PollMax, c.PollJitter = time.Millisecond, time.Millisecond, 0
	l := c.FollowLoop(time.Now())
	start := time.Now()
	if err := l.SleepAtLeast(context.Background(), 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("slept %v, want at least the 30ms asked for (backoff is 1ms)", d)
	}
	// Clamped to the window: a Retry-After longer than what is left.
	l = c.FollowLoop(time.Now())
	l.Deadline = time.Now().Add(20 * time.Millisecond)
	start = time.Now()
	_ = l.SleepAtLeast(context.Background(), time.Hour)
	if d := time.Since(start); d > time.Second {
		t.Errorf("slept %v past the window", d)
	}
}

// TestResumeClampedPerClockOverruns shows that the property test sees a resume whose connect
// and total clocks are each clamped to what remains of the follow window (the code
// did that, and the model did not): modelled that way, the follow overruns ContinuationMax and
// the attempt the budget, for the issue's configuration and for many random ones.
func TestResumeClampedPerClockOverruns(t *testing.T) {
	issue := Default()
	issue.ResendPolicy, issue.Background, issue.Resume = ResendNever, true, true
	issue.ConnectTimeout, issue.StallTimeout, issue.StreamTotal = 1500*time.Millisecond, time.Second, 2*time.Second
	issue.ContinuationMax, issue.RequestTimeout, issue.AdmissionGrace = 2*time.Second, 200*time.Millisecond, 200*time.Millisecond
	issue.DeliveryAllowance, issue.SafetyMargin, issue.StopGrace = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	if err := issue.Validate(); err != nil {
		t.Fatal(err)
	}
	perClock := func(c Config) Trace {
		s := &simulator{c: c, r: WorstDraw, start: time.Unix(0, 0), now: time.Unix(0, 0), perClock: true}
		s.spend(TermThread, StepThread, c.ThreadResolution())
		s.send(TermConnect, TermStream)
		s.search(TermAdmission)
		s.follow(TermContinuation)
		s.spend(TermDelivery, StepDeliver, c.DeliveryAllowance)
		return Trace{Steps: s.steps, Total: s.now.Sub(s.start)}
	}
	tr := perClock(issue)
	if f := tr.TermTotal(TermContinuation); f <= issue.ContinuationMax {
		t.Fatalf("per-clock resume: follow %v within ContinuationMax %v; the model cannot tell the two apart", f, issue.ContinuationMax)
	}
	t.Logf("the overrun configuration: per-clock resume follows %v (ContinuationMax %v), attempt %v; one deadline: %v",
		tr.TermTotal(TermContinuation), issue.ContinuationMax, tr.Total, issue.WorstCase(nil))
	over := 0
	cs := validConfigs(t, 6, propertyCount()/3)
	for _, c := range cs {
		c.ResendPolicy, c.Resume = ResendNever, true
		if perClock(c).Total > c.TaskTimeout()-c.SafetyMargin {
			over++
		}
	}
	if over == 0 {
		t.Errorf("no configuration overruns with a per-clock resume")
	}
	t.Logf("%d of %d configurations overrun the budget with a per-clock resume", over, len(cs))
}
