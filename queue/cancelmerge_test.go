package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// A turn that is parked (its task revoked, in no Asynq queue until its
// re-enqueue) is a waiting turn to Cancel: it is cancelled at once, its
// record marked dropped so that the re-enqueue puts nothing back, and it
// leaves its line.
func TestCancelParkedTurn(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	conv := record.Conversation{Integration: "web", ChatID: "cancel-parked"}
	m1 := Message{AgentID: "agent-1", Text: "first", Conversation: conv, MessageID: "m1"}
	if _, err := c.Enqueue(ctx, m1); err != nil {
		t.Fatal(err)
	}
	r2, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "second", Conversation: conv, MessageID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	p := parkAndDie(t, w, insp, q, r2.TaskID, time.Now())

	res, err := c.Cancel(ctx, CancelRequest{TaskID: r2.TaskID, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != 1 || res.Turns[0].Status != CancelDone {
		t.Fatalf("cancel of a parked turn: %+v, want cancelled", res.Turns)
	}
	ev, found, err := c.cfg.Replies.FinalEvent(ctx, conv, r2.TaskID)
	if err != nil || !found || ev.StopReason != record.StopReasonCancelled {
		t.Errorf("final event %+v (found %v, err %v), want cancelled", ev, found, err)
	}
	if pos, err := c.seq.Position(ctx, c.cfg.Ordering.Key(m1), r2.TaskID); err != nil || pos >= 0 {
		t.Errorf("the cancelled turn's place in its line: %d (%v), want none", pos, err)
	}
	// The re-enqueue in flight (read before the cancel) puts nothing back.
	if err := w.lines.Enqueue(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.GetTaskInfo(q, r2.TaskID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("the cancelled parked turn is back in Asynq: %v", err)
	}
}

// A turn continued by a takeover (takeover.go) whose original task has
// ended is running, not answered: Cancel records the cancel and asks its
// worker (cancelling). Without the takeover, the ended task is reported as
// ended and nothing is recorded.
func TestCancelTakenOverTurn(t *testing.T) {
	c, _, insp, q := parkingEnv(t)
	ctx := context.Background()
	conv := record.Conversation{Integration: "web", ChatID: "cancel-takeover"}
	r, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "hi", Conversation: conv, MessageID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := insp.ArchiveTask(q, r.TaskID); err != nil { // as Asynq leaves it: ended
		t.Fatal(err)
	}
	res, err := c.Cancel(ctx, CancelRequest{TaskID: r.TaskID})
	if err != nil || len(res.Turns) != 1 || res.Turns[0].Status != CancelAnswered {
		t.Fatalf("cancel of an ended turn: %+v, %v; want already ended", res, err)
	}

	runner := "takeover:w-dead:" + r.TaskID
	if _, err := c.ac.Enqueue(asynq.NewTask(TakeoverTaskType, []byte("{}")), asynq.TaskID(runner), asynq.Queue(q)); err != nil {
		t.Fatal(err)
	}
	tk := store.NewTakeover(c.cfg.Replies.rdb, store.Keys{Prefix: c.cfg.Replies.opts.Prefix})
	if err := tk.MarkTakenOver(ctx, r.TaskID, runner, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err = c.Cancel(ctx, CancelRequest{TaskID: r.TaskID})
	if err != nil || len(res.Turns) != 1 || res.Turns[0].Status != CancelAsked {
		t.Fatalf("cancel of a taken-over turn: %+v, %v; want cancelling", res, err)
	}
	if _, found, err := c.cfg.Replies.st.GetCancel(ctx, r.TaskID); err != nil || !found {
		t.Errorf("no cancel record for the taken-over turn (%v)", err)
	}
}
