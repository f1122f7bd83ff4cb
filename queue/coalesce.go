package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/ordering"
)

// follower is a message merged into the turn (coalescing).
type follower struct {
	taskID string
	msg    Message
}

// mergeText is the one user message of a turn that took followers: the
// texts in order, separated by a blank line, each prefixed with its sender
// ("sender: text") when the senders differ.
func mergeText(head Message, fs []follower) string {
	msgs := []Message{head}
	for _, f := range fs {
		msgs = append(msgs, f.msg)
	}
	differ := false
	for _, m := range msgs[1:] {
		if m.SenderID != head.SenderID {
			differ = true
		}
	}
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		if differ && m.SenderID != "" {
			b.WriteString(m.SenderID + ": ")
		}
		b.WriteString(m.Text)
	}
	return b.String()
}

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

// takeFollowers sets t.followers: the messages merged into this turn by an
// earlier attempt, or, on a first send (no intent journaled yet), those
// waiting right behind it now.
func (t *turn) takeFollowers(ctx context.Context, firstSend bool) error {
	o := t.w.ord
	if o == nil || !o.cfg.coalesces(t.msg.Conversation.Integration) {
		return nil
	}
	ids, err := o.seq.MergedFollowers(ctx, t.key, t.taskID)
	if err != nil {
		return err
	}
	if len(ids) == 0 && firstSend {
		if ids, err = o.seq.TakeFollowers(ctx, t.key, t.taskID, o.cfg.MaxCoalesce); err != nil {
			return err
		}
		t.newFollowers = ids
	}
	t.followers = t.followers[:0]
	for _, id := range ids {
		info, err := ordering.FindTask(o.insp, t.queue, id)
		if err != nil {
			if errors.Is(err, asynq.ErrTaskNotFound) {
				t.log.Warn("merged message's task is gone: its text is left out", "merged_task", id)
				continue
			}
			return fmt.Errorf("load merged task %s: %w", id, err)
		}
		m, err := DecodePayload(info.Payload)
		if err != nil {
			t.log.Warn("merged message's payload is invalid: its text is left out", "merged_task", id, "error", err.Error())
			continue
		}
		t.followers = append(t.followers, follower{taskID: id, msg: m})
	}
	return nil
}

// finishFollowers writes the final event of every merged message: ev's
// kind, naming this turn in answered_by (an answer carries no text: the
// text is in this turn's answer).
func (t *turn) finishFollowers(ctx context.Context, ev ReplyEvent) {
	for _, f := range t.followers {
		fe := ReplyEvent{Type: ev.Type, TaskID: f.taskID, Otid: t.otid, RunID: ev.RunID, MessageID: f.msg.MessageID,
			StopReason: ev.StopReason, Permanent: ev.Permanent, AnsweredBy: t.taskID, Tool: ev.Tool}
		if ev.Type == EventError {
			fe.Text = "the turn this message was merged into failed: " + ev.Text
		}
		if _, err := t.w.replies.EmitAnswerOnce(ctx, f.msg.Conversation, fe); err != nil {
			t.redisFailed()
			t.log.Warn("could not emit the merged message's final event", "merged_task", f.taskID, "error", err.Error())
		}
	}
}
