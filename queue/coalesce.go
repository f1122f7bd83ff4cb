package queue

import (
	"context"
	"time"
)

// coalesced ends a task whose message was merged into the turn of head:
// the journal says so (outcome coalesced, AnsweredBy); the final reply
// event of the message is written by head's turn when it ends (an answer
// with answered_by and no text, or a permanent error).
func (t *turn) coalesced(ctx context.Context, head string) error {
	dctx, cancel := t.w.deliveryCtx(ctx)
	defer cancel()
	rec, err := t.w.journal.Get(dctx, t.taskID)
	if err != nil {
		rec = &TurnRecord{}
	}
	now := time.Now()
	rec.TaskID, rec.Otid, rec.AgentID = t.taskID, t.otid, t.msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = t.msg.Conversation, t.msg.MessageID, t.queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = t.msg.EnqueuedAt
	}
	if rec.FirstStartedAt.IsZero() {
		rec.FirstStartedAt = t.start
	}
	if rec.Outcome != OutcomeCoalesced {
		rec.Attempts = append(rec.Attempts, Attempt{N: len(rec.Attempts) + 1, Worker: t.w.cfg.WorkerID,
			Start: t.start, End: now.UTC(), Outcome: OutcomeCoalesced})
	}
	rec.Outcome, rec.AnsweredBy, rec.FinishedAt = OutcomeCoalesced, head, now.UTC()
	t.jr.SetRecord(rec)
	if err := t.w.journal.Save(dctx, rec); err != nil {
		t.redisFailed()
		t.log.Warn("could not journal the coalesced turn", "error", err.Error())
	}
	t.writeResult(OutcomeCoalesced, "", nil)
	t.log.Info("message merged into an earlier turn", "answered_by", head)
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	t.obs.TurnFinished(t.queue, OutcomeCoalesced, t.jr.Latency(now), 0)
	return nil
}

// finishFollowers writes the final event of every merged message: ev's
// kind, naming this turn in answered_by (an answer carries no text: the
// text is in this turn's answer).
func (t *turn) finishFollowers(ctx context.Context, ev ReplyEvent) {
	for _, f := range t.line.Followers() {
		fe := ReplyEvent{Type: ev.Type, TaskID: f.TaskID, Otid: t.otid, RunID: ev.RunID, MessageID: f.MessageID,
			StopReason: ev.StopReason, Permanent: ev.Permanent, AnsweredBy: t.taskID, Tool: ev.Tool}
		if ev.Type == EventError {
			fe.Text = "the turn this message was merged into failed: " + ev.Text
		}
		if _, err := t.w.replies.EmitAnswerOnce(ctx, f.Conversation, fe); err != nil {
			t.redisFailed()
			t.log.Warn("could not emit the merged message's final event", "merged_task", f.TaskID, "error", err.Error())
		}
	}
}
