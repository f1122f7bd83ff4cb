package queue

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/attempt"
)

// A worker's cancel channel: a cancel recorded while the worker was not subscribed is found
// when it subscribes (the records of its running turns are read then), and one published
// while it is subscribed reaches the turn it names; a turn not running here is left alone.
func TestWatchCancels(t *testing.T) {
	srv := testredis.New(t)
	prefix := "lettaq-unit:watch-" + time.Now().Format("150405.000000") + ":"
	w, err := NewWorker(WorkerConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Letta: LettaConnection{URL: "http://127.0.0.1:1"},
		Stores: WorkerStores{RepliesOptions: RepliesOptions{Prefix: prefix}, JournalOptions: JournalOptions{Prefix: prefix}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.closeRedis)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newTurn := func(id string) *attempt.Pipeline {
		tt := &attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Logger: log, IDs: &attempt.IDs{TaskID: id}, ID: attempt.ID{TaskID: id}}
		w.attempts.Cancels.Add(tt.TaskID, tt.AsCancel())
		return tt
	}
	missed, heard, other := newTurn("turn:missed"), newTurn("turn:heard"), newTurn("turn:other")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Recorded (and published) before the worker subscribes.
	if _, err := w.replies.st.PutCancel(ctx, missed.TaskID, []byte(`{"by":"early"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { w.watchCancels(ctx); close(done) }()
	waitFor := func(tt *attempt.Pipeline, by string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if cr := tt.Cx.Asked(); cr != nil {
				if cr.By != by {
					t.Errorf("%s: cancel by %q, want %q", tt.TaskID, cr.By, by)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never heard of its cancel", tt.TaskID)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(missed, "early")
	if _, err := w.replies.st.PutCancel(ctx, heard.TaskID, []byte(`{"by":"later"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	waitFor(heard, "later")
	if other.Cx.Asked() != nil {
		t.Error("a turn nobody cancelled was told it was")
	}
	cancel()
	<-done
}
