package queue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// A turn that must wait parks (queue/internal/line): not its turn in its
// conversation's line, or its chat's approval request open. The attempt
// journals the wait (one Wait per thing waited behind) and, for an
// approval, tells the chat.

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
			return err == nil && (finalOutcome(rec.Outcome) || rec.Outcome == OutcomeCoalesced)
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

// recordWait journals that the turn waits behind behind (one Wait per
// thing waited behind: nothing is written when the open wait is the same,
// and first is false then). rec is the turn's record as read (nil: it is
// read here).
func (t *turn) recordWait(ctx context.Context, rec *TurnRecord, behind, reason string) (first bool) {
	if rec == nil {
		r, err := t.w.journal.Get(ctx, t.taskID)
		switch {
		case errors.Is(err, ErrNotFound):
			r = &TurnRecord{TaskID: t.taskID, Otid: t.otid, AgentID: t.msg.AgentID, Conversation: t.msg.Conversation,
				MessageID: t.msg.MessageID, Queue: t.queue, EnqueuedAt: t.msg.EnqueuedAt}
		case err != nil:
			t.log.Debug("could not read the journal to record the wait", "error", err.Error())
			return true
		}
		rec = r
	}
	if !addWait(rec, behind, reason, time.Now().UTC()) {
		return false
	}
	if err := t.w.journal.Save(ctx, rec); err != nil {
		t.log.Debug("could not journal the wait", "error", err.Error())
	}
	return true
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

// logWait logs the turn's wait: Info when it starts waiting behind
// something new, Debug for a look again.
func (t *turn) logWait(first bool, msg string, attrs ...any) {
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelInfo
	}
	t.log.Log(context.Background(), lvl, msg, attrs...)
}

// parkNotYourTurn parks an attempt that is not its conversation's turn
// (err: a *ordering.NotYourTurnError): its journal record gets the wait;
// nil when it could not park (it is put back as before).
func (t *turn) parkNotYourTurn(ctx context.Context, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ahead, perr := t.line.ParkBehindTurn(rctx, err)
	if perr == nil {
		return nil
	}
	t.obs.AttemptFinished(t.queue, "busy", time.Since(t.start))
	first := t.recordWait(rctx, nil, ahead.Head, ahead.Reason)
	t.logWait(first, "the turn waits for the turn ahead of it", "behind", ahead.Head, "position", ahead.Position,
		"recheck_in", t.w.lines.Recheck().String())
	return perr
}

// parkApproval parks a message that waits for the answer to its chat's
// approval request p, with or without ordering: the attempt is no attempt
// (the record is left as it was, with one wait behind the request), the
// awaiting_approval phase is emitted when the wait begins. nil when it
// could not park.
//
// The message is noted as a waiter of the request, which the answer (or
// the expiry) wakes (line.Lines.WakeApprovalWaiters). An answer recorded between the
// gate's read and that note would miss it: the request is read again after
// the note, and a message whose request was answered meanwhile wakes
// itself (its record is marked woken: its re-enqueue makes it pending).
func (t *turn) parkApproval(ctx context.Context, log *slog.Logger, p *approval.Pending) error {
	behind := "approval request " + p.RequestTaskID
	reason := "waiting for the answer to approval request " + p.RequestTaskID
	perr := t.line.Park(ctx, behind, reason)
	if perr == nil {
		return nil
	}
	t.obs.AttemptFinished(t.queue, "busy", time.Since(t.start))
	if err := t.line.NoteApprovalWaiter(ctx, p.RequestTaskID); err != nil {
		log.Debug("could not note the waiter on its approval request", "error", err.Error())
	}
	if now, err := t.w.approvals.Store().Get(ctx, p.RequestTaskID); errors.Is(err, ErrNoApproval) || (err == nil && now.AnsweredBy != "") {
		if err := t.line.WakeParked(ctx); err != nil {
			log.Debug("could not wake the message whose approval request was answered meanwhile", "error", err.Error())
		}
	}
	t.jr.Lock()
	t.jr.Rec().Attempts = t.jr.Rec().Attempts[:t.jr.Index()]
	if len(t.jr.Rec().Attempts) == 0 {
		t.jr.Rec().FirstStartedAt = time.Time{}
	}
	first := addWait(t.jr.Rec(), behind, reason, time.Now().UTC())
	t.jr.Unlock()
	if first {
		t.emit(ReplyEvent{Type: EventPhase, Phase: PhaseAwaitingApproval,
			Approval: &ApprovalEvent{RequestTaskID: p.RequestTaskID, ExpiresAt: p.ExpiresAt}})
	}
	t.progress.End(ctx)
	if err := t.save(ctx); err != nil { // (replaces the save prepare queued)
		log.Warn("could not journal the wait", "error", err.Error())
	}
	t.logWait(first, "the message waits for the answer to the chat's approval request", "recheck_in", t.w.lines.Recheck().String())
	return perr
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
