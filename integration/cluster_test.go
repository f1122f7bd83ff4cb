package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/app"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/internal/thread"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// clusterPrefix is the key prefix the README prescribes for Redis Cluster.
const clusterPrefix = "{lettaq}:"

// TestClusterTurns runs the real worker wiring (app.StartWorker, two
// workers) against a 3-node Redis Cluster with LETTAQ_KEY_PREFIX
// "{lettaq}:", ordering on: 25 turns over 5 conversations, a fifth of them
// with a cut stream, a stalled stream or a 500 after the message was stored
// (so the continuation path runs), enqueued through queue.Client and the
// enqueue command, plus a conversation whose waiting messages are
// coalesced. Every turn must get exactly one answer, every otid must reach
// the agent once, in enqueue order per conversation, and the journal, the
// ordering lines, /metrics and /readyz must work on the cluster.
func TestClusterTurns(t *testing.T) {
	cl := testredis.StartCluster(t, 3)
	seeds := strings.Join(cl.Addrs, ",")
	connOpt := asynq.RedisClusterClientOpt{Addrs: cl.Addrs}
	rdb := cl.Client(t)

	sim := lettasim.NewServer(lettasim.Config{PingInterval: 40 * time.Millisecond, TimeScale: simScale})
	t.Cleanup(sim.Close)
	const queueName = "lettaq-cluster"
	b := testBudget()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: clusterPrefix})
	journal := queue.NewJournal(rdb, queue.JournalOptions{Prefix: clusterPrefix})
	// The worker keeps the ordering lines under queue.OrderingPrefix of the
	// key prefix (each line carries its conversation as hash tag). A client
	// with another prefix would join other lines: the enqueue command below
	// (the worker's own wiring) checks that this one joins the same.
	ord := queue.Ordering{Config: ordering.Config{Prefix: queue.OrderingPrefix(clusterPrefix)}}
	client, err := queue.NewClient(queue.ClientConfig{Redis: connOpt, Budget: b, Queue: queueName,
		Replies: replies, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	insp := asynq.NewInspector(connOpt)
	t.Cleanup(func() { _ = insp.Close() })
	e := &env{t: t, queue: queueName, prefix: clusterPrefix, sim: sim, budget: b, client: client,
		replies: replies, journal: journal, insp: insp}

	getenv := func(extra map[string]string) func(string) string {
		vars := map[string]string{
			// An address nothing answers on: in cluster mode REDIS_URL's host must go unused.
			"REDIS_URL":                  "redis://127.0.0.1:1/0",
			"LETTAQ_REDIS_CLUSTER_ADDRS": seeds,
			"LETTAQ_KEY_PREFIX":          clusterPrefix,
			"LETTAQ_QUEUE":               queueName,
		}
		for k, v := range extra {
			vars[k] = v
		}
		return func(k string) string { return vars[k] }
	}
	enqueueCLI := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := app.RunEnqueue(context.Background(), args, getenv(nil), nil, &out, &errOut)
		if code != app.ExitOK {
			t.Errorf("enqueue %v: exit %d: %s", args, code, errOut.String())
		}
		return out.String(), code
	}

	// Five conversations, one agent each, five turns each; the faults make
	// the first attempt lose its stream (cut, stalled) or its response.
	const convs, per = 5, 5
	faults := []string{
		"",
		"disconnect_after=3",
		"stall=forever stall_after=2",
		"status_after_store=500",
		fmt.Sprintf("tools=lookup tool_delay=%s disconnect_after=4", simDur(50*time.Millisecond)),
	}
	type turn struct {
		res   queue.EnqueueResult
		conv  int
		fault string
	}
	agents := make([]string, convs)
	cs := make([]record.Conversation, convs)
	marks := make([][]string, convs)
	var turns []turn
	message := func(k, i int) (queue.Message, string) {
		mark := fmt.Sprintf("c%d-m%d", k, i)
		fault := faults[(k+i)%len(faults)]
		text := fmt.Sprintf("[[sim think=%s answer=a-%s %s]] %s", simDur(30*time.Millisecond), mark, fault, mark)
		marks[k] = append(marks[k], mark)
		return queue.Message{AgentID: agents[k], Conversation: cs[k], MessageID: mark, Text: text}, fault
	}
	for k := range convs {
		agents[k] = sim.CreateAgent(fmt.Sprintf("cluster-%d", k), nil)
		cs[k] = record.Conversation{Integration: "test", ChatID: fmt.Sprintf("chat-%d-%s", k, randHex(3))}
	}
	// Rounds 0-2 through queue.Client, before any worker runs: each turn
	// joins its line at the tail.
	for i := range 3 {
		for k := range convs {
			m, fault := message(k, i)
			r := e.enqueue(m)
			if r.Duplicate || r.Position != i {
				t.Fatalf("%s: enqueue result %+v, want position %d", m.MessageID, r, i)
			}
			turns = append(turns, turn{r, k, fault})
		}
	}
	// Round 3 through the enqueue command: same cluster, same lines.
	for k := range convs {
		m, fault := message(k, 3)
		out, code := enqueueCLI("--json", "--agent", m.AgentID, "--integration", m.Conversation.Integration,
			"--chat", m.Conversation.ChatID, "--message-id", m.MessageID, m.Text)
		if code != app.ExitOK {
			t.FailNow()
		}
		var r queue.EnqueueResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("enqueue --json printed %q: %v", out, err)
		}
		if r.Duplicate || r.Position != 3 || r.Queue != queueName {
			t.Fatalf("%s: enqueue command result %+v, want position 3 in %s (the worker's ordering lines)", m.MessageID, r, queueName)
		}
		turns = append(turns, turn{r, k, fault})
	}

	// Two workers, wired as cmd/worker wires them.
	var running []*app.Running
	for _, id := range []string{"A", "B"} {
		cfg, err := app.ParseWorkerSettings(nil, getenv(map[string]string{
			"LETTA_BASE_URL":             sim.URL,
			"LETTAQ_QUEUES":              queueName,
			"LETTAQ_HTTP_ADDR":           "127.0.0.1:0",
			"LETTAQ_CONCURRENCY":         "50",
			"LETTAQ_TASK_CHECK_INTERVAL": "50ms",
			"LETTAQ_HEARTBEAT_INTERVAL":  "200ms",
			"LETTAQ_SHUTDOWN_TIMEOUT":    "3s",
			"LETTAQ_COALESCE":            "coal",
			"LETTAQ_WORKER_ID":           "cluster-" + id,
		}), io.Discard)
		if err != nil {
			t.Fatalf("worker config: %v", err)
		}
		cfg.Budget = b
		ctx, cancel := context.WithCancel(context.Background())
		r, err := app.StartWorker(ctx, cfg, testLogger(t).With("worker", id), io.Discard)
		if err != nil {
			cancel()
			t.Fatalf("start worker %s: %v", id, err)
		}
		t.Cleanup(func() {
			cancel()
			select {
			case <-r.Done():
				if err := r.Err(); err != nil {
					t.Errorf("worker %s: %v", id, err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("worker %s did not stop", id)
			}
		})
		running = append(running, r)
	}
	t0 := time.Now()

	// Round 4 through queue.Client while the workers run.
	for k := range convs {
		m, fault := message(k, 4)
		r := e.enqueue(m)
		if r.Position < -1 || r.Position > 4 {
			t.Errorf("%s: position %d", m.MessageID, r.Position)
		}
		turns = append(turns, turn{r, k, fault})
	}

	// Coalescing: a long turn, then two messages while it runs; the second
	// and third go to the agent as one message.
	coalAgent := sim.CreateAgent("cluster-coal", nil)
	coalConv := record.Conversation{Integration: "coal", ChatID: "chat-" + randHex(3)}
	long := e.enqueue(queue.Message{AgentID: coalAgent, Conversation: coalConv, MessageID: "first",
		Text: fmt.Sprintf("[[sim think=%s answer=one]] first", simDur(1500*time.Millisecond))})
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err = sim.WaitOtid(wctx, long.Otid) // sent: it took no followers
	cancel()
	if err != nil {
		t.Fatalf("the long turn never reached the agent: %v", err)
	}
	second := e.enqueue(queue.Message{AgentID: coalAgent, Conversation: coalConv, MessageID: "second", Text: "second"})
	third := e.enqueue(queue.Message{AgentID: coalAgent, Conversation: coalConv, MessageID: "third", Text: "third"})
	if second.Position != 1 || third.Position != 2 {
		t.Errorf("coalesced conversation: positions %d, %d, want 1, 2", second.Position, third.Position)
	}

	// Every turn answers, with the answer its message asked for.
	for _, tu := range turns {
		final, evs := e.waitFinal(cs[tu.conv], tu.res.TaskID, 20*time.Second)
		want := "a-" + strings.TrimPrefix(tu.res.TaskID, "turn:test:"+cs[tu.conv].ChatID+":")
		if final.Type != record.EventAnswer || final.Text != want {
			t.Errorf("%s (%s): final %s %q, want answer %q; %s", tu.res.TaskID, tu.fault, final.Type, final.Text, want, summarize(evs))
		}
	}
	for _, r := range []queue.EnqueueResult{long, second, third} {
		e.waitFinal(coalConv, r.TaskID, 20*time.Second)
	}
	took := time.Since(t0)
	e.settled() // no attempt left that could write a late second answer

	// Exactly one final event per turn, in each conversation's stream.
	finals := map[string][]record.ReplyEvent{}
	for _, c := range append(slices.Clone(cs), coalConv) {
		for _, ev := range e.events(c, "") {
			if countFinal([]record.ReplyEvent{ev}) == 1 {
				finals[ev.TaskID] = append(finals[ev.TaskID], ev)
			}
		}
	}
	for _, tu := range turns {
		if n := len(finals[tu.res.TaskID]); n != 1 {
			t.Errorf("%s (%s): %d final events", tu.res.TaskID, tu.fault, n)
		}
		if n := sim.CountOtid(tu.res.Otid); n != 1 {
			t.Errorf("%s (%s): otid stored %d times at the agent", tu.res.TaskID, tu.fault, n)
		}
	}
	if len(finals) != len(turns)+3 {
		t.Errorf("%d turns with a final event, want %d", len(finals), len(turns)+3)
	}
	// Per conversation: the agent got the messages in enqueue order, one run at a time.
	for k := range convs {
		checkOrder(t, sim, agents[k], marks[k])
		checkSerialRuns(t, sim, agents[k], per)
		// The default thread mode: each chat in a Letta conversation of its
		// own, its id kept under the hash-tagged prefix.
		got := sim.Conversations(agents[k])
		id, err := rdb.Get(context.Background(), thread.Key(clusterPrefix, agents[k], cs[k].Integration, cs[k].ChatID)).Result()
		if len(got) != 1 || err != nil || id != got[0].ID || len(sim.ConversationUserMessages(id)) != per {
			t.Errorf("chat %d: conversations %+v, thread key %q (%v)", k, got, id, err)
		}
	}
	// Coalescing across the cluster (script keys built inside takeLua).
	if got := sim.UserMessages(coalAgent); len(got) != 2 || got[1].Text != "second\n\nthird" {
		t.Errorf("coalesced conversation: the agent received %+v, want first, then \"second\\n\\nthird\"", got)
	}
	for _, r := range []queue.EnqueueResult{second, third} {
		if f := finals[r.TaskID]; len(f) != 1 || f[0].Type != record.EventAnswer || f[0].AnsweredBy != second.TaskID {
			t.Errorf("coalesced %s: finals %+v, want one answer answered_by %s", r.TaskID, f, second.TaskID)
		}
	}
	if rec := e.record(third.TaskID); rec.Outcome != record.OutcomeCoalesced || rec.AnsweredBy != second.TaskID {
		t.Errorf("journal of %s: outcome %q answered_by %q", third.TaskID, rec.Outcome, rec.AnsweredBy)
	}

	// The journal: records, intents, otid index, filters; and through the enqueue command.
	ctx := context.Background()
	continued := 0
	for _, tu := range turns {
		rec := e.record(tu.res.TaskID)
		if rec.Outcome != record.OutcomeAnswered || rec.Otid != tu.res.Otid || rec.Conversation != cs[tu.conv] {
			t.Errorf("journal of %s: outcome %q otid %q conversation %v", tu.res.TaskID, rec.Outcome, rec.Otid, rec.Conversation)
		}
		if in, err := journal.Intents(ctx, tu.res.TaskID); err != nil || len(in) == 0 {
			t.Errorf("intents of %s: %v, %v", tu.res.TaskID, in, err)
		}
		if byOtid, err := journal.ByOtid(ctx, tu.res.Otid); err != nil || byOtid.TaskID != tu.res.TaskID {
			t.Errorf("journal by otid %s: %+v, %v", tu.res.Otid, byOtid, err)
		}
		// A fault sends the turn down the continuation path (recovering,
		// continuing), a stall by the stall clock; a clean turn never goes there.
		continuing, clock := false, ""
		for _, a := range rec.Attempts {
			if a.TimeoutClock != "" {
				clock = a.TimeoutClock
			}
			for _, p := range a.Phases {
				continuing = continuing || p.Phase == string(record.PhaseContinuing)
			}
		}
		switch {
		case tu.fault == "" && (continuing || len(rec.Attempts) != 1):
			t.Errorf("%s (no fault): %s", tu.res.TaskID, describeAttempts(rec))
		case tu.fault != "" && !continuing:
			t.Errorf("%s (%s): the journal shows no continuation: %s", tu.res.TaskID, tu.fault, describeAttempts(rec))
		case strings.HasPrefix(tu.fault, "stall=") && clock != record.TimeoutClockStall:
			t.Errorf("%s (%s): no attempt ended by the stall clock: %s", tu.res.TaskID, tu.fault, describeAttempts(rec))
		}
		if tu.fault != "" {
			continued++
		}
	}
	recent, err := journal.Recent(ctx, queue.FilterAll, 100)
	if err != nil {
		t.Fatal(err)
	}
	inRecent := map[string]bool{}
	for _, rec := range recent {
		inRecent[rec.TaskID] = true
	}
	for _, tu := range turns {
		if !inRecent[tu.res.TaskID] {
			t.Errorf("journal recent: %s missing", tu.res.TaskID)
		}
	}
	if stalls, err := journal.Recent(ctx, queue.FilterStalls, 100); err != nil || len(stalls) == 0 {
		t.Errorf("journal stalls: %d records, %v", len(stalls), err)
	}
	out, _ := enqueueCLI("--json", "journal", "show", turns[1].res.TaskID)
	var shown record.TurnRecord
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.TaskID != turns[1].res.TaskID || shown.Outcome != record.OutcomeAnswered {
		t.Errorf("enqueue journal show: %v; %s", err, out)
	}
	out, _ = enqueueCLI("--json", "--limit", "100", "journal", "recent")
	var listed []record.TurnRecord
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != len(turns)+3 {
		t.Errorf("enqueue journal recent: %d records (want %d), %v", len(listed), len(turns)+3, err)
	}

	// Every line is empty and no conversation is held.
	seq, err := ordering.New(rdb, ord.Config)
	if err != nil {
		t.Fatal(err)
	}
	for k := range convs {
		key := ord.Key(queue.Message{AgentID: agents[k], Conversation: cs[k]})
		n, err := seq.Len(ctx, key)
		holder, _, herr := seq.Holder(ctx, key)
		if err != nil || herr != nil || n != 0 || holder != "" {
			t.Errorf("line %s: %d waiting, held by %q (%v, %v)", key, n, holder, err, herr)
		}
	}

	// The HTTP side reads the cluster too: /readyz pings it, /metrics inspects the queues.
	for _, r := range running {
		if body, code := httpGet(t, "http://"+r.HTTPAddr+"/readyz"); code != http.StatusOK {
			t.Errorf("worker %s /readyz: %d %s", r.Config.WorkerID, code, body)
		}
		body, code := httpGet(t, "http://"+r.HTTPAddr+"/metrics")
		if code != http.StatusOK || !strings.Contains(body, "lettaq_queue_scrape_errors 0") ||
			!strings.Contains(body, fmt.Sprintf(`asynq_tasks_enqueued_total{queue=%q,state="completed"} %d`, queueName, len(turns)+3)) {
			t.Errorf("worker %s /metrics: %d; queue lines: %s", r.Config.WorkerID, code, grepLines(body, "lettaq_queue_scrape_errors", queueName))
		}
	}

	// Nothing was written outside the configured names: Asynq's keys, the
	// prefix's keys, the ordering lines, and the deployment's layout record.
	var stray []string
	var mu sync.Mutex
	err = rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, "*").Result()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if !strings.HasPrefix(k, "asynq:") && !strings.HasPrefix(k, clusterPrefix) && !strings.HasPrefix(k, ord.Config.Prefix) && k != shard.RecordKey(queueName) {
				stray = append(stray, k)
			}
		}
		return err
	})
	if err != nil || len(stray) > 0 {
		t.Errorf("keys outside asynq:, %s and %s: %v (%v)", clusterPrefix, ord.Config.Prefix, stray, err)
	}
	t.Logf("%d turns (%d with a fault) + 3 coalesced over %d conversations on a 3-node cluster in %v",
		len(turns), continued, convs, took.Round(time.Millisecond))
}

func httpGet(t *testing.T, url string) (string, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return "", 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

func grepLines(s string, subs ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(line, sub) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
