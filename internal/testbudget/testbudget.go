// Package testbudget holds the time budget that the end-to-end tests and the chaos run give
// their workers: production's shape with short clocks, so that a stalled stream, a lost one
// and a whole continuation happen in seconds against the simulator.
package testbudget

import (
	"time"

	"github.com/lettaq/lettaq/budget"
)

// Short is a budget with short clocks: connect 1s, stall 300ms (the simulator pings every
// 40ms), stream 5s, admission 600ms, continuation 5s, resume and background sends on, resend
// if not admitted. Its TaskTimeout is about 27s.
func Short() budget.Config {
	b := budget.Default()
	b.ConnectTimeout = time.Second
	b.StallTimeout = 300 * time.Millisecond
	b.ContentIdleNotice = 0
	b.StreamTotal = 5 * time.Second
	b.StopGrace = 100 * time.Millisecond
	b.AdmissionGrace = 600 * time.Millisecond
	b.ContinuationMax = 5 * time.Second
	b.PollInitial = 20 * time.Millisecond
	b.PollMax = 200 * time.Millisecond
	b.PollJitter = 0.1
	b.RequestTimeout = time.Second
	b.Resume = true
	b.Background = true
	b.ResendPolicy = budget.ResendIfNotAdmitted
	b.DeliveryAllowance = time.Second
	b.SafetyMargin = time.Second
	return b
}
