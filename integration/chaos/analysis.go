package main

import (
	"fmt"
	"slices"
	"time"
)

// The pure part of the report: what the simulator received and what the
// journal says, reduced to the figures the table shows.

// OrderViolations counts the arrivals of one chat's messages, numbered
// 1..K in the order they were enqueued, that reached the agent after a
// message with a higher number: arrivals holds the numbers in the order the
// simulator stored them. Only a message's first arrival counts (a second
// one is a duplicate, counted apart).
func OrderViolations(arrivals []int) int {
	seen := map[int]bool{}
	highest, n := 0, 0
	for _, k := range arrivals {
		if seen[k] {
			continue
		}
		seen[k] = true
		if k < highest {
			n++
		}
		highest = max(highest, k)
	}
	return n
}

// DuplicateStats reduces the number of user messages stored per otid at
// the simulator to the most for one otid and how many otids were stored
// more than once.
func DuplicateStats(perOtid map[string]int) (maxPerOtid, duplicated int) {
	for _, n := range perOtid {
		maxPerOtid = max(maxPerOtid, n)
		if n > 1 {
			duplicated++
		}
	}
	return maxPerOtid, duplicated
}

// AttemptSpan is one attempt of a turn from the journal: its worker and
// when it started and ended (End zero: it never recorded an end, as an
// attempt whose process was killed).
type AttemptSpan struct {
	Worker     string
	Start, End time.Time
}

// Takeover is how long after a stop of worker at At the next attempt of one
// of the worker's in-flight turns started, i.e. the turn continued
// elsewhere.
func Takeover(attempts []AttemptSpan, worker string, at time.Time) (time.Duration, bool) {
	for i, a := range attempts {
		if a.Worker != worker || a.Start.After(at) || (!a.End.IsZero() && a.End.Before(at)) {
			continue
		}
		if i+1 < len(attempts) {
			return attempts[i+1].Start.Sub(at), true
		}
	}
	return 0, false
}

// Spread is the min, median and max of a set of durations.
type Spread struct {
	N                int
	Min, Median, Max time.Duration
}

// SpreadOf returns the spread of ds (N 0 when empty).
func SpreadOf(ds []time.Duration) Spread {
	if len(ds) == 0 {
		return Spread{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{N: len(s), Min: s[0], Median: med, Max: s[len(s)-1]}
}

func (s Spread) String() string {
	if s.N == 0 {
		return "no sample"
	}
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("%v / %v / %v (%d turns)", r(s.Min), r(s.Median), r(s.Max), s.N)
}
