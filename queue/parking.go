package queue

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// A turn that must wait parks (queue/internal/line): not its turn in its
// conversation's line, or its chat's approval request open. The attempt's
// completer journals the wait (one Wait per thing waited behind: addWait)
// and, for an approval, tells the chat (waiting.go).

// newLines makes the worker's side of its chats' lines (w.ord set, or nil
// without ordering): parking, waking, the sweep, the attempts' places.
func newLines(w *Worker) *line.Lines {
	cfg := line.Config{
		Parking:  store.Parking{RDB: w.replies.rdb, Keys: store.Keys{Prefix: w.replies.opts.Prefix}},
		Conn:     w.conn,
		WorkerID: w.cfg.WorkerID, Log: w.log,
		Recheck: w.cfg.Ordering.recheck(), SweepEvery: w.cfg.ParkSweepEvery,
		Decode: func(b []byte) (line.Follower, error) {
			m, err := DecodePayload(b)
			return line.Follower{MessageID: m.MessageID, SenderID: m.SenderID, Text: m.Text, Conversation: m.Conversation}, err
		},
		Finished: func(ctx context.Context, taskID string) bool {
			rec, err := w.journal.Get(ctx, taskID)
			return err == nil && (attempt.FinalOutcome(rec.Outcome) || rec.Outcome == OutcomeCoalesced)
		},
	}
	if w.ord != nil {
		cfg.Seq, cfg.Insp = w.ord.seq, w.ord.insp
		cfg.Coalesce, cfg.MaxCoalesce = w.ord.cfg.coalesces, w.ord.cfg.MaxCoalesce
		cfg.ReleaseWithWrites = w.seqOnWorkerRedis() && w.replies.rdb == w.rdb
		_, cfg.Single = w.rdb.(*redis.Client)
	}
	return line.New(cfg)
}

// addWait adds a wait behind behind to rec, closing the open one if it is
// behind something else; false when the open wait is already this one (the
// answer turn of an approval request the turn waits behind is part of that
// wait).
func addWait(rec *TurnRecord, behind, reason string, now time.Time) bool {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		open := rec.Waits[n-1].Behind
		if open == behind {
			return false
		}
		if req, ok := strings.CutPrefix(open, "approval request "); ok && isAnswerOf(behind, req) {
			return false
		}
		rec.Waits[n-1].Until = now
	}
	rec.Waits = append(rec.Waits, Wait{From: now, Behind: behind, Reason: reason})
	return true
}

// endWaits closes rec's open wait: the turn starts at now.
func endWaits(rec *TurnRecord, now time.Time) {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		rec.Waits[n-1].Until = now.UTC()
	}
}

// openWait is rec's open wait, nil when none.
func openWait(rec *TurnRecord) *Wait {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		return &rec.Waits[n-1]
	}
	return nil
}

// isAnswerOf reports whether taskID is an answer turn of the approval
// request requestTaskID (approval.AnswerTaskIDAfter: its first answer, or one after
// failed ones).
func isAnswerOf(taskID, requestTaskID string) bool {
	if taskID == AnswerTaskID(requestTaskID) {
		return true
	}
	rest, ok := strings.CutPrefix(taskID, "answer#")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, ":")
	return ok && rest == strings.TrimPrefix(AnswerTaskID(requestTaskID), "answer:")
}
