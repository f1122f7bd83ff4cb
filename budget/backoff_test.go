package budget

import (
	"math"
	"testing"
	"time"
)

func TestBackoffFromConfig(t *testing.T) {
	b := Default().Backoff()
	want := Backoff{Initial: time.Second, Max: 15 * time.Second, Multiplier: 2, Jitter: 0.2}
	if b != want {
		t.Errorf("Backoff() = %+v, want %+v", b, want)
	}
	if b.MaxDelay() != 15*time.Second {
		t.Errorf("MaxDelay() = %v", b.MaxDelay())
	}
}

func TestBackoffDelayTable(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 15 * time.Second, Multiplier: 2, Jitter: 0.2}
	noJitter := b
	noJitter.Jitter = 0
	tests := []struct {
		name    string
		b       Backoff
		attempt int
		r       float64
		want    time.Duration
	}{
		{"first, no jitter", noJitter, 0, 0.3, time.Second},
		{"second, no jitter", noJitter, 1, 0.9, 2 * time.Second},
		{"fourth, no jitter", noJitter, 3, 0.5, 8 * time.Second},
		{"capped, no jitter", noJitter, 4, 0.5, 15 * time.Second},
		{"r=0.5 is the base", b, 2, 0.5, 4 * time.Second},
		{"r=0 is the low end", b, 0, 0, 800 * time.Millisecond},
		{"r→1 is the high end", b, 0, WorstDraw(), 1200 * time.Millisecond},
		{"r=0 on the cap", b, 10, 0, 12 * time.Second},
		{"r→1 on the cap stays at Max", b, 10, WorstDraw(), 15 * time.Second},
		{"fourth, r→1", b, 3, WorstDraw(), 9600 * time.Millisecond},
		{"fourth, r=0.99", b, 3, 0.99, 9568 * time.Millisecond},
		{"jitter past Max is capped again", Backoff{Initial: time.Second, Max: 9 * time.Second, Multiplier: 2, Jitter: 0.2}, 3, WorstDraw(), 9 * time.Second},
		{"huge attempt, no overflow", b, math.MaxInt, 0.5, 15 * time.Second},
		{"huge attempt, r→1", b, math.MaxInt, WorstDraw(), 15 * time.Second},
		{"huge attempt, r=0", b, math.MaxInt, 0, 12 * time.Second},
		{"negative attempt is 0", noJitter, -5, 0.5, time.Second},
		{"r=1 treated as just below 1", b, 0, 1, 1200 * time.Millisecond},
		{"r>1 clamped", b, 0, 7, 1200 * time.Millisecond},
		{"r<0 clamped", b, 0, -1, 800 * time.Millisecond},
		{"r NaN clamped", b, 0, math.NaN(), 800 * time.Millisecond},
		{"multiplier 1 is constant", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 1}, 1000, 0.5, time.Second},
		{"multiplier below 1 is 1", Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 0.1}, 5, 0.5, time.Second},
		{"zero Max", Backoff{Initial: time.Second, Multiplier: 2}, 3, 0.5, 0},
		{"zero Initial", Backoff{Max: time.Second, Multiplier: 2}, 3, 0.5, 0},
		{"huge Max, huge attempt", Backoff{Initial: time.Second, Max: math.MaxInt64, Multiplier: 10, Jitter: 0.5}, 1 << 40, WorstDraw(), math.MaxInt64},
		{"Max below Initial caps", Backoff{Initial: time.Minute, Max: time.Second, Multiplier: 2}, 0, 0.5, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.Delay(tt.attempt, tt.r)
			// Float rounding may cost a nanosecond or so below the exact value.
			if diff := tt.want - got; diff < 0 || diff > 2 {
				t.Errorf("Delay(%d, %v) = %v, want %v", tt.attempt, tt.r, got, tt.want)
			}
			if got < 0 || got > tt.b.MaxDelay() {
				t.Errorf("Delay(%d, %v) = %v outside [0, %v]", tt.attempt, tt.r, got, tt.b.MaxDelay())
			}
		})
	}
}

func TestBackoffDelayProperties(t *testing.T) {
	draws := []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, WorstDraw()}
	for _, b := range []Backoff{
		{Initial: time.Second, Max: 15 * time.Second, Multiplier: 2, Jitter: 0.2},
		{Initial: time.Millisecond, Max: time.Hour, Multiplier: 1.1, Jitter: 0.99},
		{Initial: 3 * time.Second, Max: 3 * time.Second, Multiplier: 1, Jitter: 0.5},
		{Initial: 7 * time.Nanosecond, Max: 9 * time.Nanosecond, Multiplier: 1.01, Jitter: 0},
		{Initial: time.Second, Max: math.MaxInt64, Multiplier: 1000, Jitter: 0.3},
	} {
		for _, r := range draws {
			prev := time.Duration(-1)
			for attempt := range 200 {
				d := b.Delay(attempt, r)
				if d < prev {
					t.Fatalf("%+v r=%v: Delay(%d)=%v < Delay(%d)=%v: not monotone", b, r, attempt, d, attempt-1, prev)
				}
				prev = d
				if d < 0 || d > b.MaxDelay() {
					t.Fatalf("%+v: Delay(%d,%v)=%v outside [0, Max]", b, attempt, r, d)
				}
				// Jitter bounds around the (capped) base.
				base := min(float64(b.Initial)*math.Pow(b.Multiplier, float64(attempt)), float64(b.Max))
				lo, hi := base*(1-b.Jitter), min(base*(1+b.Jitter), float64(b.Max))
				if float64(d) < lo-2 || float64(d) > hi+2 {
					t.Fatalf("%+v: Delay(%d,%v)=%v outside jitter bounds [%v, %v]", b, attempt, r, d, lo, hi)
				}
			}
		}
		// For a fixed attempt, a larger draw never gives a shorter delay.
		for attempt := range 50 {
			prev := time.Duration(-1)
			for _, r := range draws {
				d := b.Delay(attempt, r)
				if d < prev {
					t.Fatalf("%+v attempt %d: Delay not monotone in r", b, attempt)
				}
				prev = d
			}
		}
	}
}

func TestWorstDraw(t *testing.T) {
	r := WorstDraw()
	if !(r < 1) || r < 0.999999 {
		t.Errorf("WorstDraw() = %v", r)
	}
}
