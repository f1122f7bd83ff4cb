package attempt

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/takeover"
	"github.com/lettaq/lettaq/queue/record"
)

// recordWriter journals an attempt's record (its journal.Attempt) through
// the attempt's progress queue, and notes the attempt's Redis failures
// (see the turn's awaitRedis). The turn and its completer share it.
type recordWriter struct {
	journal  journalWriter // where a journal with a client of its own saves
	oneRedis bool          // the journal is on the writer's client: saves go with its round trips
	jr       *journal.Attempt
	progress *progress.Queue
	rn       *fence.Runner
	log      *slog.Logger
	actx     context.Context // the attempt's context: saveLater writes without its cancellation
	trouble  atomic.Bool     // a Redis read or write failed: see the turn's awaitRedis
}

// newRecordWriter is the record writer of the attempt that runner runs
// (its journal record and progress queue come with Use).
func newRecordWriter(j journalWriter, oneRedis bool, rn *fence.Runner, log *slog.Logger, actx context.Context) *recordWriter {
	return &recordWriter{journal: j, oneRedis: oneRedis, rn: rn, log: log, actx: actx}
}

// use gives the writer the attempt's journal side and progress queue.
func (r *recordWriter) use(jr *journal.Attempt, q *progress.Queue) { r.jr, r.progress = jr, q }

// sawRedisFail reports whether a Redis read or write of the attempt failed
// since it was last asked, and forgets it.
func (r *recordWriter) sawRedisFail() bool { return r.trouble.Swap(false) }

// WriteFailed is told of a queued write that failed (a progress event, an
// intermediate journal save): logged, never fatal.
func (r *recordWriter) WriteFailed(err error) {
	r.RedisFailed()
	r.log.Debug("a queued write did not reach Redis", "error", err.Error())
}

// RedisFailed notes that a Redis read or write of this attempt failed.
func (r *recordWriter) RedisFailed() { r.trouble.Store(true) }

// Save journals the record after everything the attempt queued before (and
// runs more with it), and waits for it.
func (r *recordWriter) Save(ctx context.Context, more ...store.Op) error {
	if r.rn.IsFenced() {
		return takeover.ErrTakenOver
	}
	if !r.oneRedis {
		r.progress.Flush(ctx)
		rec := r.jr.Copy()
		err := r.journal.SaveBy(ctx, &rec, r.jr.Runner())
		if err == nil {
			err = r.progress.Do(ctx, nil, more...)
		}
		if err != nil {
			r.RedisFailed()
		}
		return err
	}
	op, err := r.jr.SaveOp(false)
	if err == nil {
		r.progress.DropQueuedSaves() // this record is newer
		err = r.progress.Do(ctx, nil, append([]store.Op{op}, more...)...)
	}
	if err != nil {
		r.RedisFailed()
	}
	return err
}

// saveLater queues a journal save of the record as it is now: it is
// written with the attempt's next writes (at the latest before its send,
// see beforeSend; a newer save that comes first replaces it), and a failure
// is only logged.
func (r *recordWriter) saveLater() {
	if r.rn.IsFenced() {
		return
	}
	if !r.oneRedis {
		// The journal has a client of its own: a direct write (it does
		// not wait for the reply streams).
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.actx), progress.TripTimeout)
		defer cancel()
		rec := r.jr.Copy()
		if err := r.journal.SaveBy(ctx, &rec, r.jr.Runner()); err != nil {
			r.WriteFailed(err)
		}
		return
	}
	// Encoded here, not when the writer takes it: the turn changes its
	// record without the lock in places (see progress.Queue.PushSave).
	op, err := r.jr.SaveOp(false)
	if err != nil {
		r.WriteFailed(err)
		return
	}
	r.progress.PushSave(progress.EncodedSave{Op: op})
}

// journalWriter is the journal as an attempt's end writes it (queue.Journal).
type journalWriter interface {
	intents
	Get(ctx context.Context, taskID string) (*record.TurnRecord, error)
	Save(ctx context.Context, rec *record.TurnRecord) error
	// SaveBy saves rec unless a runner newer than runner saved it.
	SaveBy(ctx context.Context, rec *record.TurnRecord, runner int64) error
	RecordRefusal(ctx context.Context, taskID, otid string, attempt int, worker string) error
}

// intents journals an attempt's intent to send (queue.Journal's).
type intents interface {
	// IntentOp is the write of the intent, sent with the attempt's queued
	// writes; prior gets the intents journaled before it.
	IntentOp(taskID, otid string, attempt int, worker string, prior *[]record.Intent) (store.Op, error)
	// RecordIntent writes the intent now and returns the prior ones.
	RecordIntent(ctx context.Context, taskID, otid string, attempt int, worker string) ([]record.Intent, error)
}
