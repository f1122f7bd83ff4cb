package slack_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// results records what the real queue answered.
type results struct {
	q  *queue.Client
	mu sync.Mutex
	rs []queue.EnqueueResult
}

func (r *results) Enqueue(ctx context.Context, m queue.Message) (queue.EnqueueResult, error) {
	res, err := r.q.Enqueue(ctx, m)
	r.mu.Lock()
	r.rs = append(r.rs, res)
	r.mu.Unlock()
	return res, err
}

// TestInboundRedeliveredEventIsOneTask: Slack's retry of an event (same
// message, X-Slack-Retry-Num 1) enqueued through the real queue is the
// same task, marked duplicate.
func TestInboundRedeliveredEventIsOneTask(t *testing.T) {
	m := miniredis.RunT(t)
	q, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: m.Addr()}, Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	rec := &results{q: q}
	f := slackfake.New(slackfake.Options{})
	defer f.Stop()
	srv := httptest.NewServer(&relayslack.Inbound{SigningSecret: f.SigningSecret(), AgentID: agent, Enqueue: rec,
		Controls: &recorder{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer srv.Close()
	ev := map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> hi", "ts": "100.1", "channel": "C1"}
	for retry := 0; retry < 2; retry++ {
		code, body := status(t)(f.Inbound().Event(srv.URL+"/events", "Ev1", ev, retry))
		if code != http.StatusOK {
			t.Fatalf("delivery %d: %d %s", retry, code, body)
		}
	}
	if len(rec.rs) != 2 || rec.rs[0].TaskID == "" || rec.rs[1].TaskID != rec.rs[0].TaskID || rec.rs[0].Duplicate || !rec.rs[1].Duplicate {
		t.Fatalf("enqueue results %+v, want one task, the second delivery a duplicate", rec.rs)
	}
}
