package queue

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// A turn that must wait parks (queue/internal/line): not its turn in its
// conversation's line, or its chat's approval request open. The attempt's
// completer journals the wait (one Wait per thing waited behind:
// attempt.AddWait) and, for an approval, tells the chat (attempt.Waiting).

// newLines makes the worker's side of its chats' lines (w.ord set, or nil
// without ordering): parking, waking, the sweep, the attempts' places.
func newLines(w *Worker) *line.Lines {
	cfg := line.Config{
		Parking:  store.Parking{RDB: w.replies.rdb, Keys: w.replies.keys()},
		Conn:     w.conn,
		WorkerID: w.cfg.WorkerID, Log: w.log,
		Recheck: w.cfg.Ordering.recheck(), SweepEvery: w.cfg.Timing.ParkSweepEvery,
		Decode: func(b []byte) (line.Follower, error) {
			m, err := DecodePayload(b)
			return line.Follower{MessageID: m.MessageID, SenderID: m.SenderID, Text: m.Text, Conversation: m.Conversation}, err
		},
		Finished: func(ctx context.Context, taskID string) bool {
			rec, err := w.journal.Get(ctx, taskID)
			return err == nil && (attempt.FinalOutcome(rec.Outcome) || rec.Outcome == record.OutcomeCoalesced)
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
