package pace

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestDeltaBufferNewlineFlush(t *testing.T) {
	clock := newRJClock()
	b := NewDeltaBuffer(time.Second, clock.Now)
	steps := []struct {
		write string
		flush string
		ok    bool
	}{
		{"Hel", "", false},
		{"lo", "", false},
		{" wor", "", false},
		{"ld\nHow", "Hello world\n", true}, // up to and including the newline
		{" are", "", false},
		{"\n\n", "How are\n\n", true}, // ends with the newline: nothing left
		{"a\nb\nc", "a\nb\n", true},   // the LAST newline
		{"", "", false},               // empty writes change nothing
		{"\n", "c\n", true},
	}
	for i, s := range steps {
		clock.Advance(100 * time.Millisecond)
		flush, ok := b.Write(s.write)
		if flush != s.flush || ok != s.ok {
			t.Fatalf("step %d: Write(%q) = %q, %v; want %q, %v", i, s.write, flush, ok, s.flush, s.ok)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("buffer holds %d bytes, want 0", b.Len())
	}
	if _, ok := b.Deadline(); ok {
		t.Fatal("empty buffer has a deadline")
	}
}

func TestDeltaBufferAgeFlush(t *testing.T) {
	clock := newRJClock()
	b := NewDeltaBuffer(time.Second, clock.Now)

	// Created long before its first token: the clock has not started.
	clock.Advance(time.Hour)
	if s, ok := b.Due(); ok {
		t.Fatalf("empty buffer due: %q", s)
	}
	if s, ok := b.Write("Hi"); ok {
		t.Fatalf("first token flushed at once: %q", s)
	}
	if d, ok := b.Deadline(); !ok || !d.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("Deadline = %v, %v; want first token + 1s", d, ok)
	}

	// Later tokens do not move the clock: it is the OLDEST token's age.
	clock.Advance(600 * time.Millisecond)
	if s, ok := b.Write(" there"); ok {
		t.Fatalf("flushed early: %q", s)
	}
	clock.Advance(399 * time.Millisecond)
	if s, ok := b.Due(); ok {
		t.Fatalf("due at 999ms: %q", s)
	}
	clock.Advance(time.Millisecond)
	if s, ok := b.Due(); !ok || s != "Hi there" {
		t.Fatalf("Due at 1s = %q, %v; want %q", s, ok, "Hi there")
	}
	if s, ok := b.Due(); ok {
		t.Fatalf("Due twice: %q", s)
	}

	// The next token starts a new clock.
	clock.Advance(5 * time.Second)
	if s, ok := b.Write("a"); ok {
		t.Fatalf("flushed at once after idle: %q", s)
	}
	// A write that finds the buffer overdue releases it (and itself).
	clock.Advance(2 * time.Second)
	if s, ok := b.Write("b"); !ok || s != "ab" {
		t.Fatalf("overdue Write = %q, %v; want %q", s, ok, "ab")
	}

	// After a newline flush, the rest's clock starts at that write.
	if s, ok := b.Write("x\ny"); !ok || s != "x\n" {
		t.Fatalf("Write = %q, %v", s, ok)
	}
	if d, _ := b.Deadline(); !d.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("Deadline after newline flush = %v, want %v", d, clock.Now().Add(time.Second))
	}
	clock.Advance(300 * time.Millisecond)
	if got := b.Flush(); got != "y" {
		t.Fatalf("Flush = %q, want %q", got, "y")
	}
	if got := b.Flush(); got != "" {
		t.Fatalf("second Flush = %q", got)
	}
}

func TestDeltaBufferDefaults(t *testing.T) {
	b := NewDeltaBuffer(0, nil)
	if b.maxAge != DefaultDeltaMaxAge || b.now == nil {
		t.Fatalf("defaults: maxAge %v", b.maxAge)
	}
	b.Write("x")
	d, ok := b.Deadline()
	if !ok || time.Until(d) > time.Second || time.Until(d) < 0 {
		t.Fatalf("Deadline = %v", d)
	}
}

// Whatever the interleaving of writes, dues and the final flush, the text
// comes out whole and in order.
func TestDeltaBufferConcurrentNoLoss(t *testing.T) {
	clock := newRJClock()
	b := NewDeltaBuffer(time.Millisecond, clock.Now)
	var (
		mu  sync.Mutex
		out []byte
	)
	collect := func(s string, ok bool) {
		if ok {
			mu.Lock()
			out = append(out, s...)
			mu.Unlock()
		}
	}
	var want []byte
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			clock.Advance(100 * time.Microsecond)
			mu.Lock() // order writes and dues against each other's output
			s, ok := b.Due()
			if ok {
				out = append(out, s...)
			}
			mu.Unlock()
		}
	}()
	for i := range 2000 {
		tok := string(rune('a' + i%26))
		if i%37 == 0 {
			tok += "\n"
		}
		want = append(want, tok...)
		mu.Lock()
		s, ok := b.Write(tok)
		if ok {
			out = append(out, s...)
		}
		mu.Unlock()
	}
	<-done
	collect(b.Flush(), true)
	if string(out) != string(want) {
		t.Fatalf("text changed:\n got %q\nwant %q", out, want)
	}
}

func TestHeartbeatSetEmitsAtOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	type beat struct {
		phase   string
		elapsed time.Duration
	}
	var (
		mu    sync.Mutex
		beats []beat
	)
	start := time.Now().Add(-time.Minute)
	h := NewHeartbeatSince(start, time.Hour, func(phase string, elapsed time.Duration) {
		mu.Lock()
		beats = append(beats, beat{phase, elapsed})
		mu.Unlock()
	})
	defer h.Stop()
	h.Set(PhaseConnecting)
	h.Set(PhaseConnecting) // no change, no emit
	h.Set(PhaseThinking)
	h.Set("") // pause: nothing to emit
	h.Set(PhaseStreaming)
	mu.Lock()
	got := beats
	mu.Unlock()
	if len(got) != 3 || got[0].phase != PhaseConnecting || got[1].phase != PhaseThinking || got[2].phase != PhaseStreaming {
		t.Fatalf("beats = %+v", got)
	}
	if got[0].elapsed < time.Minute || got[0].elapsed > 2*time.Minute {
		t.Fatalf("elapsed = %v, want about 1m (from start)", got[0].elapsed)
	}
	if h.Phase() != PhaseStreaming {
		t.Fatalf("Phase = %q", h.Phase())
	}
}

func TestHeartbeatRepeats(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var (
		count   atomic.Int64
		stopped atomic.Bool
		late    atomic.Int64
	)
	beat := make(chan string, 100)
	h := NewHeartbeat(2*time.Millisecond, func(phase string, _ time.Duration) {
		if stopped.Load() {
			late.Add(1)
		}
		count.Add(1)
		select {
		case beat <- phase:
		default:
		}
	})
	// Nothing before the first Set, even over several intervals.
	select {
	case p := <-beat:
		t.Fatalf("beat %q before any Set", p)
	case <-time.After(20 * time.Millisecond):
	}
	h.Set(PhaseThinking)
	deadline := time.After(10 * time.Second)
	for n := 0; n < 5; {
		select {
		case p := <-beat:
			if p != PhaseThinking {
				t.Fatalf("beat %q", p)
			}
			n++
		case <-deadline:
			t.Fatalf("only %d beats in 10s at a 2ms interval", count.Load())
		}
	}
	var wg sync.WaitGroup
	for range 4 { // Stop is idempotent and safe from many goroutines
		wg.Add(1)
		go func() { defer wg.Done(); h.Stop() }()
	}
	wg.Wait()
	stopped.Store(true)
	h.Set(PhaseStreaming) // after Stop: nothing
	time.Sleep(20 * time.Millisecond)
	if late.Load() != 0 {
		t.Fatalf("%d emits after Stop returned", late.Load())
	}
	h.Stop()
}

// Repeats are spaced from the last emit, so a Set right before a tick does
// not make a double beat.
func TestHeartbeatSpacing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var (
		mu    sync.Mutex
		times []time.Duration
	)
	const interval = 30 * time.Millisecond
	// The beats' times are the heartbeat's own (elapsed since start), not
	// the callback's clock reading, which a loaded machine may delay for one
	// beat and not the next.
	h := NewHeartbeatSince(time.Now(), interval, func(_ string, elapsed time.Duration) {
		mu.Lock()
		times = append(times, elapsed)
		mu.Unlock()
	})
	h.Set(PhaseConnecting)
	time.Sleep(interval / 2)
	h.Set(PhaseStreaming)
	time.Sleep(3 * interval)
	h.Stop()
	mu.Lock()
	defer mu.Unlock()
	// Timers only fire late, never early: every gap after the second Set is
	// at least interval.
	for i := 2; i < len(times); i++ {
		if gap := times[i] - times[i-1]; gap < interval {
			t.Fatalf("beat %d came %v after the one before, interval %v", i, gap, interval)
		}
	}
	if len(times) < 2 {
		t.Fatalf("%d beats", len(times))
	}
}

// rjClock is a settable clock (a copy of package queue's test clock).
type rjClock struct {
	mu sync.Mutex
	t  time.Time
}

func newRJClock() *rjClock {
	return &rjClock{t: time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)}
}

func (c *rjClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *rjClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Phases as package queue names them (any strings do for a Heartbeat).
const (
	PhaseConnecting = "connecting"
	PhaseStreaming  = "streaming"
	PhaseThinking   = "thinking"
)
