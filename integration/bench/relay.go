package main

// The relay's figures (go run ./integration/bench -relay): reply events written straight
// into the streams with queue.Replies (the worker's own writer, so no Letta and no worker),
// relay replicas in this process against the fake platform (relay/fakeplatform, in
// process, with an optional latency per call).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
)

// RelayConfig sizes a relay run.
type RelayConfig struct {
	// RedisURL is the Redis to use; "" starts a redis-server of the run's own
	// (no persistence) on a free loopback port.
	RedisURL string
	// Chats each have a turn in flight: accepted, a phase and Deltas
	// answer_delta events of 100 characters each (a 2,000-character answer
	// growing, with the default 20).
	Chats, Deltas int
	// Replicas: the whole run is repeated for each count (default 1 and 2).
	Replicas []int
	// Workers per replica (LETTAQ_RELAY_WORKERS).
	Workers int
	// Latency is added to every platform call.
	Latency time.Duration
	// Quick and Streamed turns are written live, while the Chats stay in
	// flight, over StreamFor: a quick answer (accepted, phase, answer at
	// once) and a Deltas×100-character answer streamed over StreamFor.
	Quick, Streamed int
	StreamFor       time.Duration
	// EditEvery is LETTAQ_RELAY_EDIT_EVERY.
	EditEvery time.Duration
}

func (c *RelayConfig) defaults() {
	if len(c.Replicas) == 0 {
		c.Replicas = []int{1, 2}
	}
	if c.Chats <= 0 {
		c.Chats = 10000
	}
	if c.Deltas <= 0 {
		c.Deltas = 20
	}
	if c.Workers <= 0 {
		c.Workers = 32
	}
	if c.StreamFor <= 0 {
		c.StreamFor = 10 * time.Second
	}
	if c.EditEvery <= 0 {
		c.EditEvery = time.Second
	}
}

const relayShards = 64

// RelayRun is one replica count's figures.
type RelayRun struct {
	Replicas int
	// Catch-up: the relays start with every chat's events in its stream.
	Events          int           // events in the backlog
	BareTime        time.Duration // a bare XREAD of every chat's stream (Workers readers): the baseline
	BareTrips       float64       // its Redis round trips per event
	Sweep           time.Duration // the start sweep (SCAN) of the slowest replica
	CatchUp         time.Duration // from the sweep's start to every event applied and shown
	CatchUpTrips    float64       // the relays' Redis round trips per event
	CatchUpCalls    float64       // platform calls per chat
	CatchUpTripsTop []nameCount
	// HeapPerChat: live heap (after a GC) with every chat in flight, minus
	// the same once the relays stopped, per chat.
	HeapPerChat int64
	// Reload: new replicas (a restart, or a takeover of every shard) until
	// every in-flight chat was loaded again and its message edited.
	Reload   time.Duration
	Reloaded int // the chats still marked (in flight) when the relays stopped
	// Burst: one event to each chat written back to back (BurstWrite), and
	// every one applied (BurstApply, from the first write).
	BurstWrite, BurstApply time.Duration
	BurstTrips             float64
	BurstTripsTop          []nameCount
	// Live turns: platform calls per answered turn by method, and the lag
	// from an event's time field to the next platform call in its chat.
	QuickCalls, StreamCalls map[string]float64
	LagStart, LagDelta      []time.Duration // accepted → first call; answer_delta → next call
	LagFinal                []time.Duration // answer → next call
	Busy                    float64         // machine CPU busy over the live part
}

// RelayResults is a relay run's figures.
type RelayResults struct {
	Config RelayConfig
	Runs   []RelayRun
}

// RunRelay measures the relay; log receives progress.
func RunRelay(ctx context.Context, c RelayConfig, log io.Writer) (*RelayResults, error) {
	c.defaults()
	if c.RedisURL == "" {
		url, stop, err := startOwnRedis(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
		c.RedisURL = url
	}
	res := &RelayResults{Config: c}
	for _, n := range c.Replicas {
		r, err := relayRun(ctx, c, n, log)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, *r)
	}
	return res, nil
}

// startOwnRedis starts redis-server without persistence on a free loopback port.
func startOwnRedis(ctx context.Context) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis-server (or pass -redis): %w", err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, _ := redis.ParseURL(url)
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	for i := 0; ; i++ {
		if rdb.Ping(ctx).Err() == nil {
			return url, stop, nil
		}
		if i == 100 {
			stop()
			return "", nil, errors.New("redis-server did not answer PING")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// benchPlatform is the fake platform behind a latency, counting calls by
// method and the live turns' final status clears.
type benchPlatform struct {
	*fakeplatform.Platform
	latency time.Duration
	calls   atomic.Int64
	cleared atomic.Int64 // status clears in the live turns' chats
	edits   atomic.Int64
	sends   atomic.Int64
}

func (p *benchPlatform) wait(ctx context.Context) {
	p.calls.Add(1)
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}

func (p *benchPlatform) Send(ctx context.Context, c record.Conversation, m relay.Message) (string, error) {
	p.wait(ctx)
	p.sends.Add(1)
	return p.Platform.Send(ctx, c, m)
}

func (p *benchPlatform) Edit(ctx context.Context, c record.Conversation, id string, m relay.Message) error {
	p.wait(ctx)
	p.edits.Add(1)
	return p.Platform.Edit(ctx, c, id, m)
}

func (p *benchPlatform) Delete(ctx context.Context, c record.Conversation, id string) error {
	p.wait(ctx)
	return p.Platform.Delete(ctx, c, id)
}

func (p *benchPlatform) Status(ctx context.Context, c record.Conversation, s relay.Status) error {
	p.wait(ctx)
	if s.Kind == relay.StatusClear && !strings.HasPrefix(c.ChatID, "bg") {
		p.cleared.Add(1)
	}
	return p.Platform.Status(ctx, c, s)
}

// replicaSet is n relay replicas in this process, each with its own Redis
// client (counted), sharing the chats by shards as separate processes do.
type replicaSet struct {
	relays  []*relay.Relay
	regs    []*prometheus.Registry
	clients []*redis.Client
	count   *redisCounter
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

func startReplicas(ctx context.Context, c RelayConfig, n int, opt *redis.Options, prefix string, plat relay.Adapter) *replicaSet {
	rs := &replicaSet{count: &redisCounter{}}
	ctx, rs.cancel = context.WithCancel(ctx)
	for i := range n {
		o := *opt
		o.PoolSize = c.Workers + 16
		rdb := redis.NewClient(&o)
		rdb.AddHook(rs.count)
		reg := prometheus.NewRegistry()
		r := relay.New(relay.Config{Redis: rdb, Prefix: prefix, EditEvery: c.EditEvery,
			Adapters: map[string]relay.Adapter{"bench": plat}, Metrics: relay.NewMetrics(reg),
			Logger: slog.New(slog.DiscardHandler)})
		rs.relays, rs.regs, rs.clients = append(rs.relays, r), append(rs.regs, reg), append(rs.clients, rdb)
		rs.done.Add(2)
		go func() {
			defer rs.done.Done()
			_ = r.Run(ctx, relay.RunConfig{ID: fmt.Sprintf("bench-%d", i), Shards: relayShards, Workers: c.Workers})
		}()
		go func() {
			defer rs.done.Done()
			for ctx.Err() == nil {
				_ = r.Notify(ctx, relayShards)
			}
		}()
	}
	return rs
}

// shared waits until the replicas hold every shard between them, each its
// share (so that no shard changes hands while measured).
func (rs *replicaSet) shared(ctx context.Context) error {
	share := (relayShards + len(rs.relays) - 1) / len(rs.relays)
	for ctx.Err() == nil {
		total, ok := 0, true
		for _, r := range rs.relays {
			h := len(r.HeldShards())
			total += h
			ok = ok && h >= relayShards/len(rs.relays) && h <= share
		}
		if ok && total == relayShards {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

// events is the sum of the replicas' lettaq_relay_events_total.
func (rs *replicaSet) events() int {
	n := 0.0
	for _, reg := range rs.regs {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "lettaq_relay_events_total" {
				for _, m := range mf.GetMetric() {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(n)
}

func (rs *replicaSet) stop() {
	rs.cancel()
	rs.done.Wait()
	for _, c := range rs.clients {
		_ = c.Close()
	}
}

// until polls cond every 10 ms, up to limit.
func until(ctx context.Context, limit time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %v", what, limit)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func chunk(n, i int) string { return fmt.Sprintf("%04d", i) + strings.Repeat("·", n-4) }

func relayRun(ctx context.Context, c RelayConfig, n int, log io.Writer) (*RelayRun, error) {
	opt, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = 128
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	prefix := fmt.Sprintf("lettaq-relaybench-%d-%d:", time.Now().UnixNano()%1e9, n)
	defer func() { _ = deletePrefix(context.WithoutCancel(ctx), rdb, prefix) }()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	out := &RelayRun{Replicas: n}
	bg := make([]record.Conversation, c.Chats)
	for i := range bg {
		bg[i] = record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("bg%d", i)}
	}

	// The backlog: every chat's turn in flight, its answer grown to Deltas×100 characters.
	fmt.Fprintf(log, "relay ×%d: writing %d chats × %d events…\n", n, c.Chats, c.Deltas+2)
	if err := each(64, func(w int) error {
		for i := w; i < len(bg); i += 64 {
			cv, task := bg[i], "t-"+bg[i].ChatID
			if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventAccepted, TaskID: task}); err != nil {
				return err
			}
			if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventPhase, TaskID: task, Phase: record.PhaseStreaming}); err != nil {
				return err
			}
			for d := range c.Deltas {
				if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: task, Text: chunk(100, d)}); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out.Events = c.Chats * (c.Deltas + 2)

	// The baseline: a bare XREAD of every stream from its start, Workers readers.
	bareCount := &redisCounter{}
	bareOpt := *opt
	bareOpt.PoolSize = c.Workers + 4
	bare := redis.NewClient(&bareOpt)
	bare.AddHook(bareCount)
	var read atomic.Int64
	t0 := time.Now()
	err = each(c.Workers, func(w int) error {
		for i := w; i < len(bg); i += c.Workers {
			ss, err := bare.XRead(ctx, &redis.XReadArgs{Streams: []string{replies.Key(bg[i]), "0"}, Count: 100}).Result()
			if err != nil {
				return err
			}
			for _, s := range ss {
				read.Add(int64(len(s.Messages)))
			}
		}
		return nil
	})
	out.BareTime = time.Since(t0)
	_ = bare.Close()
	if err != nil {
		return nil, err
	}
	if int(read.Load()) != out.Events {
		return nil, fmt.Errorf("bare XREAD read %d events, want %d", read.Load(), out.Events)
	}
	trips, _ := bareCount.snapshot()
	out.BareTrips = float64(trips) / float64(out.Events)

	// The relays start: share the shards, sweep, drain every chat.
	plat := &benchPlatform{Platform: fakeplatform.New(relay.Limits{}), latency: c.Latency}
	runtime.GC()
	fmt.Fprintf(log, "relay ×%d: catching up with %d events…\n", n, out.Events)
	rs := startReplicas(ctx, c, n, opt, prefix, plat)
	if err := rs.shared(ctx); err != nil {
		return nil, err
	}
	rs.count.trace.Store(true)
	trips0, _ := rs.count.snapshot()
	calls0 := plat.calls.Load()
	t0 = time.Now()
	var sweepMax atomic.Int64
	if err := each(n, func(i int) error {
		s0 := time.Now()
		if _, err := rs.relays[i].Sweep(ctx, relayShards); err != nil {
			return err
		}
		d := int64(time.Since(s0))
		for {
			m := sweepMax.Load()
			if d <= m || sweepMax.CompareAndSwap(m, d) {
				return nil
			}
		}
	}); err != nil {
		return nil, err
	}
	out.Sweep = time.Duration(sweepMax.Load())
	if err := until(ctx, 10*time.Minute, "catch-up", func() bool {
		return rs.events() >= out.Events && plat.sends.Load() >= int64(c.Chats)
	}); err != nil {
		return nil, err
	}
	out.CatchUp = time.Since(t0)
	trips1, _ := rs.count.snapshot()
	rs.count.trace.Store(false)
	out.CatchUpTrips = float64(trips1-trips0) / float64(out.Events)
	out.CatchUpTripsTop = rs.count.names()
	out.CatchUpCalls = float64(plat.calls.Load()-calls0) / float64(c.Chats)

	// Memory: every chat in flight, then the relays gone.
	runtime.GC()
	var m1, m2 runtime.MemStats
	runtime.ReadMemStats(&m1)
	rs.stop()
	rs = nil
	runtime.GC()
	runtime.ReadMemStats(&m2)
	out.HeapPerChat = (int64(m1.HeapAlloc) - int64(m2.HeapAlloc)) / int64(c.Chats)

	// A restart: new replicas load every in-flight chat again (its state, a
	// replay of its turn's events) and edit its message.
	fmt.Fprintf(log, "relay ×%d: restarting over %d in-flight chats…\n", n, c.Chats)
	dirty := 0
	for sh := range relayShards {
		k, err := rdb.ZCard(ctx, fmt.Sprintf("%srelay:dirty:%d", prefix, sh)).Result()
		if err != nil {
			return nil, err
		}
		dirty += int(k)
	}
	out.Reloaded = dirty
	edits0 := plat.edits.Load()
	t0 = time.Now()
	rs = startReplicas(ctx, c, n, opt, prefix, plat)
	defer func() { rs.stop() }()
	if err := until(ctx, 10*time.Minute, "reload", func() bool { return plat.edits.Load()-edits0 >= int64(dirty) }); err != nil {
		return nil, err
	}
	out.Reload = time.Since(t0)
	if err := rs.shared(ctx); err != nil {
		return nil, err
	}

	// A burst: one more answer_delta to every in-flight chat, written back to back,
	// found through the keyspace notifications.
	fmt.Fprintf(log, "relay ×%d: a burst of %d events…\n", n, c.Chats)
	events0 := rs.events()
	rs.count.trace.Store(true)
	trips0, _ = rs.count.snapshot()
	t0 = time.Now()
	if err := each(64, func(w int) error {
		for i := w; i < len(bg); i += 64 {
			if _, err := replies.Emit(ctx, bg[i], record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t-" + bg[i].ChatID, Text: "+"}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out.BurstWrite = time.Since(t0)
	if err := until(ctx, 10*time.Minute, "burst", func() bool { return rs.events()-events0 >= c.Chats }); err != nil {
		return nil, err
	}
	out.BurstApply = time.Since(t0)
	trips1, _ = rs.count.snapshot()
	rs.count.trace.Store(false)
	out.BurstTrips = float64(trips1-trips0) / float64(c.Chats)
	out.BurstTripsTop = rs.count.names()

	// Live turns beside the in-flight chats.
	fmt.Fprintf(log, "relay ×%d: %d quick and %d streamed turns over %v…\n", n, c.Quick, c.Streamed, c.StreamFor)
	live := c.Quick + c.Streamed
	busy0, total0, cpuOK := machineCPU()
	calls := plat.Calls()
	mark := len(calls)
	if err := each(live, func(i int) error {
		// Spread the turns' starts over StreamFor.
		time.Sleep(time.Duration(i) * c.StreamFor / time.Duration(max(live, 1)))
		if i < c.Quick {
			cv := record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("q%d", i)}
			task := "t-" + cv.ChatID
			if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventAccepted, TaskID: task}); err != nil {
				return err
			}
			if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventPhase, TaskID: task, Phase: record.PhaseThinking}); err != nil {
				return err
			}
			_, err := replies.EmitAnswerOnce(ctx, cv, record.ReplyEvent{Type: record.EventAnswer, TaskID: task, Text: "A quick answer."})
			return err
		}
		cv := record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("s%d", i)}
		task := "t-" + cv.ChatID
		if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventAccepted, TaskID: task}); err != nil {
			return err
		}
		if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventPhase, TaskID: task, Phase: record.PhaseStreaming}); err != nil {
			return err
		}
		var text strings.Builder
		for d := range c.Deltas {
			time.Sleep(c.StreamFor / time.Duration(c.Deltas))
			ch := chunk(100, d)
			text.WriteString(ch)
			if _, err := replies.Emit(ctx, cv, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: task, Text: ch}); err != nil {
				return err
			}
		}
		_, err := replies.EmitAnswerOnce(ctx, cv, record.ReplyEvent{Type: record.EventAnswer, TaskID: task, Text: text.String()})
		return err
	}); err != nil {
		return nil, err
	}
	if err := until(ctx, 2*time.Minute, "live turns shown", func() bool { return plat.cleared.Load() >= int64(live) }); err != nil {
		return nil, err
	}
	if busy1, total1, ok := machineCPU(); ok && cpuOK && total1 > total0 {
		out.Busy = float64(busy1-busy0) / float64(total1-total0)
	}
	calls = plat.Calls()[mark:]
	byChat := map[string][]fakeplatform.Call{}
	out.QuickCalls, out.StreamCalls = map[string]float64{}, map[string]float64{}
	for _, cl := range calls {
		_, id, _ := strings.Cut(cl.Chat, ":")
		switch {
		case strings.HasPrefix(id, "q"):
			out.QuickCalls[callName(cl)]++
		case strings.HasPrefix(id, "s"):
			out.StreamCalls[callName(cl)]++
		default:
			continue
		}
		if cl.Status == 200 {
			byChat[cl.Chat] = append(byChat[cl.Chat], cl)
		}
	}
	for k := range out.QuickCalls {
		out.QuickCalls[k] /= float64(c.Quick)
	}
	for k := range out.StreamCalls {
		out.StreamCalls[k] /= float64(c.Streamed)
	}
	for i := range live {
		id := fmt.Sprintf("q%d", i)
		if i >= c.Quick {
			id = fmt.Sprintf("s%d", i)
		}
		cv := record.Conversation{Integration: "bench", ChatID: id}
		evs, _, err := replies.Read(ctx, cv, "0", 0, 0)
		if err != nil {
			return nil, err
		}
		cs := byChat[cv.String()]
		for _, ev := range evs {
			j := slices.IndexFunc(cs, func(cl fakeplatform.Call) bool { return !cl.At.Before(ev.Time) })
			if j < 0 {
				return nil, fmt.Errorf("%s: no platform call after its %s event", cv, ev.Type)
			}
			lag := cs[j].At.Sub(ev.Time)
			switch ev.Type {
			case record.EventAccepted:
				out.LagStart = append(out.LagStart, lag)
			case record.EventAnswerDelta:
				out.LagDelta = append(out.LagDelta, lag)
			case record.EventAnswer:
				out.LagFinal = append(out.LagFinal, lag)
			}
		}
	}
	return out, nil
}

// each runs f(0) … f(n-1), each in a goroutine of its own, and returns the first error.
func each(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func callName(cl fakeplatform.Call) string {
	if cl.Method == "status" {
		return "status " + string(cl.Kind)
	}
	return cl.Method
}

func deletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		_ = rdb.Unlink(ctx, batch...).Err()
	}
	return iter.Err()
}

// Table renders the relay's figures as Markdown.
func (r *RelayResults) Table() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "lettaq relay benchmark: %d CPUs, Go %s, %d chats each with a turn in flight (%d answer_delta events of 100 characters), %d workers per replica, %d shards, edits at most 1 per %v per chat, platform latency %v per call\n\n",
		runtime.NumCPU(), runtime.Version(), c.Chats, c.Deltas, c.Workers, relayShards, c.EditEvery, c.Latency)
	b.WriteString("| measure | relay | baseline | ratio |\n|---|---|---|---|\n")
	for _, x := range r.Runs {
		eps := float64(x.Events) / x.CatchUp.Seconds()
		bare := float64(x.Events) / x.BareTime.Seconds()
		fmt.Fprintf(&b, "| **%d replica(s)**: catch-up, %d events in the streams when the relay starts (sweep %.2f s included) | %.0f events/s (%.0f per replica) in %.2f s | %.0f events/s: a bare XREAD of each stream, %d readers | %.3f |\n",
			x.Replicas, x.Events, x.Sweep.Seconds(), eps, eps/float64(x.Replicas), x.CatchUp.Seconds(), bare, c.Workers, eps/bare)
		fmt.Fprintf(&b, "| Redis round trips per event (catch-up) | %.2f: %s | %.2f | %.1f× |\n",
			x.CatchUpTrips, topCalls(shortPipelines(x.CatchUpTripsTop), x.Events), x.BareTrips, x.CatchUpTrips/x.BareTrips)
		fmt.Fprintf(&b, "| platform calls per chat caught up (typing, its refreshes while the catch-up lasts, the message) | %.2f | | |\n", x.CatchUpCalls)
		fmt.Fprintf(&b, "| live heap per in-flight chat (after a GC, every chat in flight, less the same once the relays stopped; each holds its %d-character answer) | %d bytes | | |\n", c.Deltas*100, x.HeapPerChat)
		fmt.Fprintf(&b, "| restart: new replicas load every in-flight chat (%d) and edit its message | %.2f s (%.0f chats/s) | | |\n",
			x.Reloaded, x.Reload.Seconds(), float64(x.Reloaded)/x.Reload.Seconds())
		fmt.Fprintf(&b, "| burst: one answer_delta to each in-flight chat, 64 writers back to back; applied (through the keyspace notifications) | all applied %.2f s after the first write: %.0f events/s | written in %.2f s: %.0f events/s | %.3f |\n",
			x.BurstApply.Seconds(), float64(c.Chats)/x.BurstApply.Seconds(), x.BurstWrite.Seconds(), float64(c.Chats)/x.BurstWrite.Seconds(), x.BurstWrite.Seconds()/x.BurstApply.Seconds())
		fmt.Fprintf(&b, "| the relays' Redis round trips per event (burst; typing refreshes included) | %.2f: %s | | |\n",
			x.BurstTrips, topCalls(shortPipelines(x.BurstTripsTop), c.Chats))
		fmt.Fprintf(&b, "| platform calls per quick answer (%d turns) | %s | | |\n", c.Quick, callsLine(x.QuickCalls))
		fmt.Fprintf(&b, "| platform calls per %d-character answer streamed over %v (%d turns) | %s | | |\n",
			c.Deltas*100, c.StreamFor, c.Streamed, callsLine(x.StreamCalls))
		lag := func(name string, ds []time.Duration) {
			fmt.Fprintf(&b, "| lag, event written (its time field) → the chat's next platform call: %s (%d events) | p50 %s, p99 %s | | |\n",
				name, len(ds), ms(pct(ds, 0.5)), ms(pct(ds, 0.99)))
		}
		lag("a turn's first event (accepted)", x.LagStart)
		lag("answer_delta (edits throttled)", x.LagDelta)
		lag("the final answer", x.LagFinal)
		if x.Busy > 0 {
			fmt.Fprintf(&b, "| machine CPU busy during the live turns (all %d CPUs, whoever used them) | %.0f%% | | |\n", runtime.NumCPU(), 100*x.Busy)
		}
	}
	return b.String()
}

// shortPipelines names a pipeline by the commands in it, each once
// ("pipeline[zincrby lpush ltrim]" for any number of marks), and adds up the
// pipelines that get the same name.
func shortPipelines(ncs []nameCount) []nameCount {
	by := map[string]int64{}
	for _, nc := range ncs {
		name := nc.name
		if inner, ok := strings.CutPrefix(name, "pipeline["); ok {
			var seen []string
			for _, w := range strings.Fields(strings.TrimSuffix(inner, "]")) {
				if !slices.Contains(seen, w) {
					seen = append(seen, w)
				}
			}
			name = "pipeline[" + strings.Join(seen, " ") + "]"
		}
		by[name] += nc.n
	}
	out := make([]nameCount, 0, len(by))
	for name, n := range by {
		out = append(out, nameCount{name, n})
	}
	slices.SortFunc(out, func(a, b nameCount) int {
		if a.n != b.n {
			return int(b.n - a.n)
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

func callsLine(m map[string]float64) string {
	total := 0.0
	var names []string
	for k, v := range m {
		total += v
		names = append(names, k)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %.2f", k, m[k])
	}
	return fmt.Sprintf("%.2f (%s)", total, strings.Join(parts, ", "))
}
