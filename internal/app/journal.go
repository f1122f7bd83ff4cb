package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// runJournal is "enqueue journal [filter] [--limit N]" and "enqueue journal show <id>".
func runJournal(ctx context.Context, o enqueueOpts, args []string, rdb redis.UniversalClient, connOpt asynq.RedisConnOpt, stdout, stderr io.Writer) int {
	layout, err := shard.New(o.shards, o.queueName, o.prefix)
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: journal: %v\n", err)
		return ExitUsage
	}
	j := queue.NewJournal(rdb, queue.JournalOptions{Prefix: o.prefix, Shards: layout})
	asJSON := o.jsonOut || !IsTerminal(stdout)
	if len(args) > 0 && args[0] == "show" {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "enqueue: usage: enqueue journal show <task-id|otid|the beginning of one>")
			return ExitUsage
		}
		rec, err := j.Lookup(ctx, args[1])
		var amb *queue.AmbiguousError
		if errors.As(err, &amb) {
			fmt.Fprintf(stderr, "enqueue: journal show: %v\n", err)
			return ExitUsage
		}
		if errors.Is(err, queue.ErrNotFound) {
			// A turn that waits and has not started has no record yet.
			insp := asynq.NewInspector(connOpt)
			defer insp.Close()
			wt, werr := queue.WaitingFinder{Inspector: insp, RDB: rdb, KeyPrefix: o.prefix, Shards: layout,
				Ordering: queueOrdering(o.ordering, o.prefix), Queues: layout.Queues()}.Find(ctx, args[1])
			if errors.As(werr, &amb) {
				fmt.Fprintf(stderr, "enqueue: journal show: %v\n", werr)
				return ExitUsage
			}
			if werr == nil {
				if asJSON {
					_ = writeJSON(stdout, wt, true)
					return ExitOK
				}
				writeWaiting(stdout, wt)
				return ExitOK
			}
		}
		if errors.Is(err, queue.ErrNotFound) {
			fmt.Fprintf(stderr, "enqueue: journal show: no turn has the task id or otid %q, nor one beginning with it (or its record expired). Recent turns:\n  %s\n",
				args[1], o.hint("journal", "recent"))
			return ExitFailed
		}
		if err != nil {
			fmt.Fprintf(stderr, "enqueue: %v\n", err)
			return ExitFailed
		}
		if asJSON {
			_ = writeJSON(stdout, rec, true)
			return ExitOK
		}
		writeRecord(stdout, rec)
		return ExitOK
	}
	name := ""
	if len(args) > 0 {
		name = args[0]
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "enqueue: unexpected %q after the journal filter\n", args[1])
		return ExitUsage
	}
	if name == "recent" {
		name = "all"
	}
	var f queue.Filter
	if err := f.UnmarshalText([]byte(name)); err != nil {
		fmt.Fprintf(stderr, "enqueue: %v (or \"recent\", or \"show <id>\")\n", err)
		return ExitUsage
	}
	recs, err := j.Recent(ctx, f, o.limit)
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitFailed
	}
	if asJSON {
		if recs == nil {
			recs = []*record.TurnRecord{}
		}
		_ = writeJSON(stdout, recs, false)
		return ExitOK
	}
	writeTable(stdout, recs)
	return ExitOK
}

func writeTable(w io.Writer, recs []*record.TurnRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WHEN\tTASK\tOUTCOME\tATTEMPTS\tCLOCKS\tPOLLS\tRESENDS\tLATENCY\tTTFT\tAGENT\tCONVERSATION")
	for _, r := range recs {
		var clocks []string
		polls := 0
		for _, a := range r.Attempts {
			if a.TimeoutClock != "" {
				clocks = append(clocks, a.TimeoutClock)
			}
			polls += a.Polls
		}
		when := r.EnqueuedAt
		if when.IsZero() {
			when = r.UpdatedAt
		}
		outcome := r.Outcome
		switch {
		case outcome == "" && openWait(r) != nil:
			outcome = "waiting"
		case outcome == "":
			outcome = "running"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n",
			when.Local().Format("01-02 15:04:05"), cell(r.TaskID), cell(outcome), len(r.Attempts),
			cell(strings.Join(clocks, ",")), polls, r.Resends, durStr(r.Latency), durStr(r.TTFT),
			cell(r.AgentID), cell(r.Conversation.String()))
	}
	_ = tw.Flush()
	if len(recs) == 0 {
		fmt.Fprintln(w, "(no turns)")
	}
}

// writeWaiting prints a turn that waits and has no journal record yet.
func writeWaiting(w io.Writer, wt *queue.WaitingTurn) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, cell(v))
		}
	}
	row("task", wt.TaskID)
	row("queue", wt.Queue)
	row("state", wt.State)
	row("reason", wt.Reason)
	row("asynq", wt.Asynq)
	if wt.Position >= 0 {
		row("position", strconv.Itoa(wt.Position))
	}
	row("since", timeStr(wt.Since))
	row("next check", timeStr(wt.NextCheck))
	_ = tw.Flush()
}

func writeRecord(w io.Writer, r *record.TurnRecord) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, cell(v))
		}
	}
	row("task", r.TaskID)
	row("otid", r.Otid)
	row("agent", r.AgentID)
	row("run", r.RunID)
	row("conversation", r.Conversation.String())
	row("message id", r.MessageID)
	row("queue", r.Queue)
	row("outcome", dash(r.Outcome))
	row("error", r.Error)
	row("stop reason", r.StopReason)
	row("answered by", r.AnsweredBy)
	row("enqueued", timeStr(r.EnqueuedAt))
	row("finished", timeStr(r.FinishedAt))
	row("queue wait", durStr(r.QueueWait))
	row("ttft", durStr(r.TTFT))
	row("latency", durStr(r.Latency))
	row("resends", strconv.Itoa(r.Resends))
	if r.Usage != nil {
		row("tokens", fmt.Sprintf("%d prompt + %d completion = %d (%d steps)", r.Usage.PromptTokens, r.Usage.CompletionTokens, r.Usage.TotalTokens, r.Usage.StepCount))
	}
	for _, t := range r.Tools {
		row("tool", fmt.Sprintf("%s %s %s", t.Name, dash(t.Status), durStr(t.Duration)))
	}
	for _, m := range r.Warnings {
		row("warning", m)
	}
	for _, wt := range r.Waits {
		row("waited", waitLine(wt))
	}
	_ = tw.Flush()
	for _, a := range r.Attempts {
		fmt.Fprintf(w, "\nattempt %d on %s: %s", a.N, cell(a.Worker), cell(a.Outcome))
		if !a.Start.IsZero() && !a.End.IsZero() {
			fmt.Fprintf(w, " (ran %s)", durStr(a.End.Sub(a.Start)))
		}
		if a.RetryIn > 0 {
			// The delay the attempt asked for before the next one (the backoff,
			// a Retry-After, a put-back's wait): not its own duration.
			fmt.Fprintf(w, ", next attempt in %s", durStr(a.RetryIn))
		}
		fmt.Fprintln(w)
		if a.TimeoutClock != "" {
			fmt.Fprintf(w, "  clock fired: %s\n", cell(a.TimeoutClock))
		}
		if a.Polls > 0 || a.Resumes > 0 {
			fmt.Fprintf(w, "  continuation: %d polls, %d resumes\n", a.Polls, a.Resumes)
		}
		if a.ResendDecision != "" {
			fmt.Fprintf(w, "  resend: %s\n", cell(a.ResendDecision))
		}
		if a.Error != "" {
			fmt.Fprintf(w, "  error: %s\n", cell(a.Error))
		}
		var phases []string
		for _, p := range a.Phases {
			phases = append(phases, fmt.Sprintf("%s +%s", p.Phase, durStr(p.At.Sub(a.Start))))
		}
		if len(phases) > 0 {
			fmt.Fprintf(w, "  phases: %s\n", cell(strings.Join(phases, " → ")))
		}
	}
}

// waitLine summarises one wait of a turn: "1m56s behind approval request X", or "behind
// turn:… for 3s so far" while it lasts.
func waitLine(wt record.Wait) string {
	if wt.Until.IsZero() {
		return fmt.Sprintf("behind %s for %s so far (%s)", wt.Behind, durStr(time.Since(wt.From)), wt.Reason)
	}
	return fmt.Sprintf("%s behind %s", durStr(wt.Until.Sub(wt.From)), wt.Behind)
}

// cell is a table cell or record value: whole (ids are never cut, so that journal show
// takes them as printed), "-" when empty, with control characters escaped.
func cell(s string) string {
	return dash(termSafe(s, false))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func durStr(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

func timeStr(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format(time.DateTime + ".000")
}
