package integration

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
	"github.com/lettaq/lettaq/relay/webchat"
)

// Every key the relay writes has a TTL, or is on the catalog's allow-list
// with its reason (the same catalog and check as TestKeyCensus). A worker
// and a relay replica run under the test's prefix: a turn and an approval
// request are shown in chats of a fake platform, a Telegram message comes in
// by long polling (its offset and poll lease) and is answered, the web chat
// page keeps what a user said. The relay is marked by sweeps, not by
// keyspace notifications (they need CONFIG SET, which the shared Redis is
// not given). The keys are read while the relay runs, once all was shown,
// and after it stopped.
func TestRelayKeyCensus(t *testing.T) {
	e := newEnv(t)
	stopWorker := e.startWorker("w1")
	defer stopWorker()
	seen := map[string]bool{}
	census := func(when string) {
		t.Helper()
		n, bad := e.checkKeys(t, seen)
		for _, b := range bad {
			t.Errorf("%s: %s", when, b)
		}
		t.Logf("%s: %d keys", when, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	tgFake := telegramfake.New("", telegramfake.Rules{})
	tgSrv := httptest.NewServer(tgFake.Handler())
	defer tgSrv.Close()
	defer tgFake.Close()
	tg, err := telegram.New(telegram.Config{Token: telegramfake.Token, ServerURL: tgSrv.URL})
	if err != nil {
		t.Fatal(err)
	}
	fake := fakeplatform.New(relay.Limits{})
	log := slog.New(slog.DiscardHandler)
	const shards = 4
	r := relay.New(relay.Config{Redis: e.rdb, Prefix: e.prefix, Control: e.client, Logger: log,
		Adapters: map[string]relay.Adapter{"test": fake, telegram.Integration: tg}})
	agent := e.sim.CreateAgent("relay-census", nil)
	in := telegram.NewInbound(tg, telegram.InboundConfig{AgentID: agent, Enqueue: e.client, Relay: r,
		BotUsername: telegramfake.BotUsername, BotID: telegramfake.BotID, Logger: log})
	// The key relay mode gives the poller (internal/app/relaytelegram.go).
	poller := &telegram.Poller{A: tg, In: in, Redis: e.rdb, Key: e.prefix + "relay:telegram:offset", Timeout: time.Second, Logger: log}

	rctx, stopRelay := context.WithCancel(ctx)
	done := make(chan struct{}, 3)
	go func() {
		_ = r.Run(rctx, relay.RunConfig{Shards: shards, LeaseTTL: 2 * time.Second})
		done <- struct{}{}
	}()
	go func() { _ = poller.Run(rctx); done <- struct{}{} }()
	go func() { // relay mode's sweep, standing in for the notifications
		defer func() { done <- struct{}{} }()
		for rctx.Err() == nil {
			_, _ = r.Sweep(rctx, shards)
			select {
			case <-rctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	stop := func() {
		stopRelay()
		for range 3 {
			<-done
		}
	}
	defer func() {
		if rctx.Err() == nil {
			stop()
		}
	}()

	c1 := e.conv("c1")
	turn := e.enqueue(queue.Message{AgentID: agent, Conversation: c1, MessageID: "m1", Text: "hello"})
	appr := e.sim.CreateAgent("relay-census-appr", nil)
	c2 := e.conv("c2")
	e.requestApproval(appr, c2, "a1", "delete_file") // shown with its buttons, left open
	const tgChat = 4242
	tgFake.SendText(telegramfake.From{Chat: tgChat}, "hi there")
	said := &webchat.RedisSaid{Redis: e.rdb, Prefix: e.prefix}
	web := record.Conversation{Integration: "web", ChatID: "census-" + randHex(3)}
	if err := said.Put(ctx, web, "w1", webchat.Said1{Text: "what the user said"}); err != nil {
		t.Fatal(err)
	}
	census("relaying")

	e.waitFinal(c1, turn.TaskID, 30*time.Second)
	tgConv := record.Conversation{Integration: telegram.Integration, ChatID: strconv.Itoa(tgChat)}
	for _, c := range []record.Conversation{c1, c2, tgConv} {
		e.waitRelayed(ctx, c)
	}
	if len(tgFake.BotMessages(tgChat)) == 0 {
		t.Error("the Telegram chat got no answer")
	}
	census("shown")
	stop()
	census("stopped")

	var kinds []string
	for k := range seen {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	t.Logf("patterns seen: %q", kinds)
	// The run reached what the census is for.
	for _, want := range []string{"P relay:chat:<integration>:<chat id>", "P relay:press:<button>", "P relay:shard:<shard>",
		"P relay:replicas", "P relay:telegram:offset", "P relay:telegram:offset:lease", "P webchat:said:<integration>:<chat id>"} {
		if !seen[want] {
			t.Errorf("the run wrote no key of %s", want)
		}
	}
}

// waitRelayed waits until the relay has applied every event of c's stream,
// its last turn finished: its cursor is the stream's last entry and no turn
// is open.
func (e *env) waitRelayed(ctx context.Context, c record.Conversation) {
	e.t.Helper()
	stream := e.replies.Key(c)
	chatKey := e.prefix + "relay:chat:" + c.Integration + ":" + c.ChatID
	for {
		final := false
		for _, ev := range e.events(c, "") {
			final = final || ev.Type.Final()
		}
		last, err := e.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		if err != nil && ctx.Err() == nil {
			e.t.Fatal(err)
		}
		h, _ := e.rdb.HGetAll(ctx, chatKey).Result()
		open := false
		for f := range h {
			open = open || strings.HasPrefix(f, "o:")
		}
		if final && len(last) == 1 && h["cursor"] == last[0].ID && !open {
			return
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("the relay did not show %s: stream %v, state %v", c, last, h)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
