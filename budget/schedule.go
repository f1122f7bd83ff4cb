package budget

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Loop paces one term that repeats tries until its window closes: the admission search
// (list the agent's messages until the turn's otid shows up) or the follow (resume the run's
// stream, then poll the run). Every request timeout, stream limit and sleep it hands out is
// clamped to what remains of the window, so the term cannot overrun it, whatever the
// backoff draws. Config.Simulate drives the same Loop on a virtual clock; that is how the
// tests prove that TaskTimeout covers the worst case of the code that really runs.
//
// Typical use in a follow term:
//
//	l := cfg.FollowLoop(time.Now())
//	for !l.Done() {
//		rctx, cancel := l.RequestContext(ctx)
//		run, err := client.GetRun(rctx, runID)
//		cancel()
//		// … stop when the run has ended …
//		if err := l.Sleep(ctx); err != nil {
//			return err
//		}
//	}
//
// A Loop is not safe for concurrent use.
type Loop struct {
	Term           string        // for logs: one of the Term… constants
	Deadline       time.Time     // the window closes here
	RequestTimeout time.Duration // bound of one request, before clamping
	Backoff        Backoff       // delays between tries, before clamping
	Now            func() time.Time
	Rand           func() float64 // uniform draws in [0,1) for the jitter; nil: math/rand/v2

	attempt   int
	unclamped bool // tests only: hand out unclamped bounds, to show that the clamp is what keeps the budget
}

// AdmissionLoop returns the Loop of an admission search that starts at start and may last
// AdmissionGrace.
func (c Config) AdmissionLoop(start time.Time) *Loop {
	return c.newLoop(TermAdmission, start, c.AdmissionGrace)
}

// FollowLoop returns the Loop of a follow (resume, then poll) that starts at start and may
// last ContinuationMax.
func (c Config) FollowLoop(start time.Time) *Loop {
	return c.newLoop(TermContinuation, start, c.ContinuationMax)
}

func (c Config) newLoop(term string, start time.Time, window time.Duration) *Loop {
	return &Loop{
		Term:           term,
		Deadline:       start.Add(max(window, 0)),
		RequestTimeout: c.RequestTimeout,
		Backoff:        c.Backoff(),
		Now:            time.Now,
	}
}

func (l *Loop) now() time.Time {
	if l.Now == nil {
		return time.Now()
	}
	return l.Now()
}

// Remaining returns what is left of the window (never negative).
func (l *Loop) Remaining() time.Duration {
	return max(l.Deadline.Sub(l.now()), 0)
}

// Done reports whether the window has closed.
func (l *Loop) Done() bool { return l.Remaining() == 0 }

// Clamp bounds d to what remains of the window: use it for anything else the term waits
// on, such as a resumed stream.
func (l *Loop) Clamp(d time.Duration) time.Duration {
	if l.unclamped && !l.Done() {
		return max(d, 0)
	}
	return clamp(d, l.Remaining())
}

// Context returns ctx ending when the window closes (at Deadline). Bound by it anything the
// term waits on whose own clocks could outlast the window, such as a resumed stream: its
// connect clock and its total (which starts at the first byte) are each clamped to what
// remains, but one after the other they could spend twice that.
func (l *Loop) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, l.Deadline)
}

// NextRequest returns the timeout of the next request: min(RequestTimeout, Remaining()).
// 0 means the window has closed: don't send.
func (l *Loop) NextRequest() time.Duration { return l.Clamp(l.RequestTimeout) }

// RequestContext returns ctx bounded by NextRequest, for one HTTP request. When the window
// has closed the returned context is already done.
func (l *Loop) RequestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.NextRequest())
}

// NextSleep draws the next backoff delay, Backoff.Delay(Attempt(), Rand()), advances the
// attempt, and returns the delay clamped to Remaining().
func (l *Loop) NextSleep() time.Duration {
	r := l.Rand
	if r == nil {
		r = rand.Float64
	}
	d := l.Backoff.Delay(l.attempt, r())
	if l.attempt < math.MaxInt {
		l.attempt++
	}
	return l.Clamp(d)
}

// Sleep waits NextSleep, or until ctx is done (then it returns ctx.Err()). It returns at
// once when the window has closed.
func (l *Loop) Sleep(ctx context.Context) error { return l.SleepAtLeast(ctx, 0) }

// SleepAtLeast is Sleep, but waits at least min (clamped to the window) when
// that is longer than the backoff: for a server's Retry-After.
func (l *Loop) SleepAtLeast(ctx context.Context, min time.Duration) error {
	d := max(l.NextSleep(), l.Clamp(min))
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Attempt returns how many sleeps have been drawn since the start or the last ResetBackoff.
func (l *Loop) Attempt() int { return l.attempt }

// ResetBackoff starts the delays over from Backoff.Initial, e.g. after a poll saw progress.
// It does not move the window.
func (l *Loop) ResetBackoff() { l.attempt = 0 }

// StepKind says what a Step spends its time on.
type StepKind string

const (
	StepThread  StepKind = "thread"  // finding or creating the chat's Letta conversation
	StepConnect StepKind = "connect" // a send waiting for the first byte of the response
	StepStream  StepKind = "stream"  // reading the SSE stream of a send
	StepRequest StepKind = "request" // one lookup or poll request
	StepResume  StepKind = "resume"  // a resumed stream of a background run
	StepSleep   StepKind = "sleep"   // a backoff delay
	StepDeliver StepKind = "deliver" // writing reply events and the result
)

// Step is one span of time in a simulated attempt.
type Step struct {
	Term   string        // one of the Term… constants
	Kind   StepKind      // what the time is spent on
	At     time.Duration // when the step starts, from the start of the attempt
	Length time.Duration
}

// Trace is a simulated attempt: its steps in order and when the last one ends.
type Trace struct {
	Steps []Step
	Total time.Duration
}

// TermTotal returns the time the trace spends in the named term.
func (t Trace) TermTotal(term string) time.Duration {
	var sum time.Duration
	for _, s := range t.Steps {
		if s.Term == term {
			sum += s.Length
		}
	}
	return sum
}

// WorstCase returns Simulate(r).Total: how long one attempt takes on the worst-case
// schedule. For a valid Config it is at most TaskTimeout() − SafetyMargin.
func (c Config) WorstCase(r func() float64) time.Duration { return c.Simulate(r).Total }

// Path names one sequence of steps the continuation's code can take in an attempt.
// SimulatePath models each; the property test checks every one against TaskTimeout, and the
// continuation's tests run the real code down each path and compare it with its model.
type Path string

const (
	// PathLostStream: the send's stream is lost (connect, then the whole stream total);
	// the history is searched for the otid (AdmissionGrace); the run is followed: a GET of
	// the run, a resumed stream bounded by the follow window's deadline, then polls (GET the
	// run, GET its messages, a backoff sleep) until ContinuationMax is spent. With the
	// resend policy allowing it, all of that once more.
	PathLostStream Path = "lost-stream"
	// PathResumeByOtid: a conversation send lost before its stream named the run. The
	// follow window opens first: the conversation's stream is resumed by the otid (bounded
	// by that window), then the history is searched (its own AdmissionGrace), then the run
	// is followed in what is left of the same window.
	PathResumeByOtid Path = "resume-by-otid"
	// PathBusy: the send is refused with a 409 busy naming a run (at worst when its connect
	// clock is about to fire); one request reads that run's messages (bounded by the
	// admission window) and, the run carrying the turn's otid, the turn follows it.
	PathBusy Path = "busy"
	// PathApprovalAnswer: an answer to an approval request is sent, lost, found and followed
	// as a message is (its otid is on its approval_response_message): PathLostStream's steps.
	PathApprovalAnswer Path = "approval-answer"
)

// Paths lists every Path SimulatePath models.
func Paths() []Path { return []Path{PathLostStream, PathResumeByOtid, PathBusy, PathApprovalAnswer} }

// Simulate runs the worst-case schedule of one attempt on a virtual clock, driving the same
// Loops the continuation uses, and returns what it spent where: SimulatePath(PathLostStream),
// the path that spends every term to its cap. r supplies the backoff's random draws in
// [0,1); nil means WorstDraw, every sleep at its jittered maximum.
//
// Every path starts with finding or creating the chat's Letta conversation, bounded by one
// context of ThreadResolution (a list and a create request, each up to RequestTimeout), and
// ends with delivery (the whole DeliveryAllowance). Every request takes its whole clamped
// timeout, every stream its clocks, and the admission search and follow run to their caps.
// This is an upper bound of any real attempt: a real one stops a term early when it finds
// what it looks for.
//
// Simulate assumes a valid Config (see Validate); it terminates for any Config.
func (c Config) Simulate(r func() float64) Trace { return c.simulate(PathLostStream, r, false) }

// SimulatePath is Simulate for the named path (see Path).
func (c Config) SimulatePath(p Path, r func() float64) Trace { return c.simulate(p, r, false) }

func (c Config) simulate(p Path, r func() float64, unclamped bool) Trace {
	if r == nil {
		r = WorstDraw
	}
	epoch := time.Unix(0, 0)
	s := &simulator{c: c, r: r, start: epoch, now: epoch, unclamped: unclamped}
	s.spend(TermThread, StepThread, c.ThreadResolution())
	switch p {
	case PathBusy:
		s.spend(TermConnect, StepConnect, c.ConnectTimeout) // answered 409 busy
		l := s.loop(c.AdmissionLoop(s.now), TermAdmission)
		s.spend(TermAdmission, StepRequest, l.NextRequest()) // the busy run's messages
		s.follow(TermContinuation)
	case PathResumeByOtid:
		s.send(TermConnect, TermStream)
		s.resumeByOtid(TermAdmission, TermContinuation)
		if c.ResendPolicy.AllowsResend() {
			s.send(TermResendConnect, TermResendStream)
			s.resumeByOtid(TermResendAdmission, TermResendContinuation)
		}
	default: // PathLostStream, PathApprovalAnswer
		s.send(TermConnect, TermStream)
		s.search(TermAdmission)
		s.follow(TermContinuation)
		if c.ResendPolicy.AllowsResend() {
			s.send(TermResendConnect, TermResendStream)
			s.search(TermResendAdmission)
			s.follow(TermResendContinuation)
		}
	}
	s.spend(TermDelivery, StepDeliver, c.DeliveryAllowance)
	return Trace{Steps: s.steps, Total: s.now.Sub(s.start)}
}

type simulator struct {
	c          Config
	r          func() float64
	start, now time.Time
	steps      []Step
	unclamped  bool
	// perClock (tests only) models the resume as the code once ran it: connect and total
	// each clamped to what remained, one after the other, instead of bounded together by the
	// window's deadline. TestResumeClampedPerClockOverruns shows the property fails then.
	perClock bool
}

func (s *simulator) clock() time.Time { return s.now }

func (s *simulator) spend(term string, kind StepKind, d time.Duration) {
	if d <= 0 {
		return
	}
	s.steps = append(s.steps, Step{Term: term, Kind: kind, At: s.now.Sub(s.start), Length: d})
	s.now = s.now.Add(d)
}

func (s *simulator) loop(l *Loop, term string) *Loop {
	l.Term, l.Now, l.Rand, l.unclamped = term, s.clock, s.r, s.unclamped
	return l
}

func (s *simulator) send(connect, stream string) {
	s.spend(connect, StepConnect, s.c.ConnectTimeout)
	s.spend(stream, StepStream, s.c.StreamTotal)
}

// search: the otid never shows up, so the search runs to the end of its window.
func (s *simulator) search(term string) {
	l := s.loop(s.c.AdmissionLoop(s.now), term)
	for !l.Done() {
		before := s.now
		s.spend(term, StepRequest, l.NextRequest())
		if l.Done() {
			break
		}
		s.spend(term, StepSleep, l.NextSleep())
		if !s.now.After(before) { // no progress: only for an invalid Config
			break
		}
	}
}

// follow: the run never ends, so the follow runs to the end of its window.
func (s *simulator) follow(term string) {
	s.followIn(s.loop(s.c.FollowLoop(s.now), term), term)
}

// followIn follows in the window of l: a GET of the run, then (Resume) one resumed stream
// until its connect and total clocks or the window's deadline, then polls.
func (s *simulator) followIn(l *Loop, term string) {
	if s.c.Resume && !l.Done() {
		s.spend(term, StepRequest, l.NextRequest()) // GET /v1/runs/{id}: active, background
		s.spend(term, StepResume, s.resumeLength(l))
	}
	for !l.Done() {
		before := s.now
		for range 2 { // GET /v1/runs/{id}, GET /v1/runs/{id}/messages
			if l.Done() {
				break
			}
			s.spend(term, StepRequest, l.NextRequest())
		}
		if l.Done() {
			break
		}
		s.spend(term, StepSleep, l.NextSleep())
		if !s.now.After(before) {
			break
		}
	}
}

// resumeByOtid: the follow window opens with a resume of the conversation's stream by the
// otid, which names no run (it ends with the window); the history search follows, in a
// window of its own, then the follow goes on in what is left of the first window.
func (s *simulator) resumeByOtid(admission, continuation string) {
	l := s.loop(s.c.FollowLoop(s.now), continuation)
	s.spend(continuation, StepResume, s.resumeLength(l))
	s.search(admission)
	s.followIn(l, continuation)
}

// resumeLength is how long a resumed stream may last in the window of l: its connect clock,
// then its total clock from the first byte, the whole bounded by the window's deadline.
func (s *simulator) resumeLength(l *Loop) time.Duration {
	if s.perClock {
		return addSat(l.Clamp(s.c.ConnectTimeout), l.Clamp(s.c.StreamTotal))
	}
	return l.Clamp(addSat(s.c.ConnectTimeout, s.c.StreamTotal))
}

func addSat(a, b time.Duration) time.Duration {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
