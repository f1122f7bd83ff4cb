package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lettaq/lettaq/queue/record"
)

// Report is what a chaos run found; Table prints it.
type Report struct {
	Config  Config
	Elapsed time.Duration

	Enqueued int
	Answered int
	// Failed counts turns that ended with a permanent error (or a journal
	// outcome other than answered), by cause.
	Failed map[string]int
	// Lost names the turns with no final event and no journal outcome.
	Lost []string

	// MaxPerOtid is the most user messages stored for one otid at the
	// simulator; Duplicated how many otids were stored more than once;
	// Missing how many turns never reached it.
	MaxPerOtid, Duplicated, Missing int
	// OrderViolations counts, over all chats, messages that reached the
	// agent after a higher-numbered message of their chat; ChatsOutOfOrder
	// the chats with at least one.
	OrderViolations, ChatsOutOfOrder int

	// Continued counts the turns that resumed or polled their run after a
	// stream fault (by the journal).
	Continued int

	Kills, Terms, RedisRestarts int
	// ActionErrors are the schedule's steps that failed (a Redis that would
	// not stop, a worker that would not exit).
	ActionErrors []string
	// Takeover: from a SIGKILL to the next attempt of the killed worker's
	// in-flight turns; PutBack the same from a SIGTERM.
	Takeover, PutBack Spread
	// Settled: when the run ended, the queue held nothing Asynq could still
	// run (no late attempt could have written anything after the count).
	Settled bool

	Workers []WorkerReport
}

// WorkerReport is one worker process's peak RSS and how it ended.
type WorkerReport struct {
	ID      string
	PeakRSS int64
	Fate    string // "SIGKILL", "SIGTERM" or "to the end"
}

// finalOutcome reports whether a journal outcome ends a turn (retrying,
// busy and still running do not).
func finalOutcome(o string) bool {
	switch o {
	case "", record.OutcomeRetrying, record.OutcomeStillRunning, record.OutcomeBusy:
		return false
	}
	return true
}

// Failures lists why the run failed: lost, duplicated or reordered turns.
// Empty when it passed.
func (r *Report) Failures() []string {
	var f []string
	if len(r.Lost) > 0 {
		f = append(f, fmt.Sprintf("%d turns lost: %s", len(r.Lost), strings.Join(r.Lost, ", ")))
	}
	if r.Duplicated > 0 {
		f = append(f, fmt.Sprintf("%d otids reached the agent more than once (at most %d times)", r.Duplicated, r.MaxPerOtid))
	}
	if r.OrderViolations > 0 {
		f = append(f, fmt.Sprintf("%d messages reached the agent out of order in %d chats", r.OrderViolations, r.ChatsOutOfOrder))
	}
	return f
}

// Table is the report as a Markdown table.
func (r *Report) Table() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "chaos run: %d workers, %d chats × %d messages over %v, schedule %s, Redis outage %v, seed %d; %v wall time\n\n",
		c.Workers, c.Chats, c.Messages, c.Duration, FormatSchedule(c.Schedule), c.Outage, c.Seed, r.Elapsed.Round(time.Second))
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	b.WriteString("| figure | value |\n|---|---|\n")
	row("turns enqueued", fmt.Sprint(r.Enqueued))
	row("answered", fmt.Sprint(r.Answered))
	row("failed (causes)", r.failedCell())
	row("**lost** (no final event, no journal outcome)", fmt.Sprint(len(r.Lost)))
	row("continued after a stream fault (resumed or polled)", fmt.Sprint(r.Continued))
	row("user messages per otid at the simulator", fmt.Sprintf("max %d; %d otids more than once; %d never arrived", r.MaxPerOtid, r.Duplicated, r.Missing))
	row("order violations", fmt.Sprintf("%d (in %d of %d chats)", r.OrderViolations, r.ChatsOutOfOrder, c.Chats))
	row("kills done", fmt.Sprintf("%d SIGKILL, %d SIGTERM", r.Kills, r.Terms))
	row("Redis restarts", fmt.Sprint(r.RedisRestarts))
	row("takeover after SIGKILL (min / median / max)", r.Takeover.String())
	row("put back after SIGTERM (min / median / max)", r.PutBack.String())
	row("queue settled at the end", yesNo(r.Settled))
	var ws []string
	for _, w := range r.Workers {
		ws = append(ws, fmt.Sprintf("%s %.0f MiB (%s)", w.ID, float64(w.PeakRSS)/(1<<20), w.Fate))
	}
	row("peak RSS per worker", strings.Join(ws, ", "))
	if len(r.ActionErrors) > 0 {
		row("schedule errors", strings.Join(r.ActionErrors, "; "))
	}
	return b.String()
}

func (r *Report) failedCell() string {
	n := 0
	var causes []string
	for cause, k := range r.Failed {
		n += k
		causes = append(causes, fmt.Sprintf("%d× %s", k, cause))
	}
	sort.Strings(causes)
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, strings.Join(causes, "; "))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
