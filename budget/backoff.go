package budget

import (
	"math"
	"time"
)

// Backoff is the delay schedule between the tries of a lookup or poll loop: exponential from
// Initial by Multiplier per try, capped at Max, spread by ±Jitter.
type Backoff struct {
	Initial, Max time.Duration
	Multiplier   float64 // >= 1
	Jitter       float64 // in [0,1)
}

// Delay returns the delay after try number attempt (0, 1, 2, …), given r, a uniform random
// draw in [0,1): base = Initial·Multiplier^attempt capped at Max, times the jitter factor
// 1 + Jitter·(2r−1), capped at Max again. The result is in [0, Max]; for a fixed r it never
// decreases as attempt grows; huge attempts give Max without overflow. Delay never panics:
// out-of-range inputs are clamped (attempt < 0 → 0, r outside [0,1) → nearest end,
// Multiplier < 1 → 1, Jitter outside [0,1] → nearest end, Max <= 0 → always 0).
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	if b.Max <= 0 || b.Initial <= 0 {
		return 0
	}
	attempt = max(attempt, 0)
	switch {
	case !(r >= 0): // also NaN
		r = 0
	case r >= 1:
		r = worstDraw
	}
	mult := b.Multiplier
	if !(mult >= 1) {
		mult = 1
	}
	jit := b.Jitter
	switch {
	case !(jit >= 0):
		jit = 0
	case jit > 1:
		jit = 1
	}
	limit := float64(b.Max)
	base := float64(b.Initial) * math.Pow(mult, float64(attempt)) // +Inf for huge attempts
	if !(base < limit) {
		base = limit
	}
	d := base * (1 + jit*(2*r-1))
	switch {
	case !(d < limit): // also NaN; float64(Max) may round above Max, so compare, don't convert
		return b.Max
	case d <= 0:
		return 0
	}
	return time.Duration(d)
}

// MaxDelay is the largest delay Delay can return: Max.
func (b Backoff) MaxDelay() time.Duration { return max(b.Max, 0) }

// worstDraw is the largest float64 below 1: the random draw that makes Delay longest.
var worstDraw = math.Nextafter(1, 0)

// WorstDraw returns the largest random draw in [0,1) (just below 1), which makes every
// jittered delay as long as it can be. Pass it to Simulate, or as a Loop's Rand, to follow
// the worst case.
func WorstDraw() float64 { return worstDraw }
