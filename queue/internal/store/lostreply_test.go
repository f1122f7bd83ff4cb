package store

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/faultproxy"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// lostReply is a Redis behind a fault proxy: a client with go-redis's
// default retries (as the worker's) through it, a direct one, and keys of
// the test's own.
func lostReply(t *testing.T) (*faultproxy.Proxy, *redis.Client, *redis.Client, Keys) {
	t.Helper()
	srv := testredis.New(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, DB: srv.DB})
	t.Cleanup(func() { _ = rdb.Close() })
	direct := srv.Client(t)
	return p, rdb, direct, Keys{Prefix: testkit.Prefix(t, direct)}
}

// scriptOn matches a script call (EVALSHA or EVAL) naming key.
func scriptOn(key string) faultproxy.Match {
	return faultproxy.Any(faultproxy.Command("evalsha", key), faultproxy.Command("eval", key))
}

func fired(t *testing.T, f *faultproxy.Fault) {
	t.Helper()
	select {
	case <-f.Fired():
	case <-time.After(10 * time.Second):
		t.Fatal("the fault never fired")
	}
}

// A claim of a dead worker whose reply is lost after Redis ran it, sent
// again, still gets the dead worker's turns: the first run took them out
// of the registry, so a retry that found nothing lost them for good.
func TestLostReplyClaimGetsTheTurns(t *testing.T) {
	p, rdb, direct, k := lostReply(t)
	ctx := context.Background()
	st := NewTakeover(rdb, k)
	dead := NewTakeover(direct, k)
	if _, err := dead.Beat(ctx, "dead", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := dead.Register(ctx, Registration{Instance: "dead", TaskID: "t1", Runner: "r1", Entry: []byte(`{"q":"default"}`),
		HolderTTL: time.Minute, LostTTL: time.Minute, After: time.Hour}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	f := p.DropReply(scriptOn(k.Takeover().Turns("dead")))
	turns, ok, err := st.Claim(ctx, "dead", "me", 10*time.Millisecond, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	fired(t, f)
	if !ok || turns["t1"] == "" {
		t.Fatalf("claim with its reply lost: ok %v, turns %v; want the dead worker's turn t1", ok, turns)
	}
	// Claimed once: another claimer gets nothing.
	if _, ok, err := NewTakeover(direct, k).Claim(ctx, "dead", "other", 10*time.Millisecond, time.Minute); ok || err != nil {
		t.Fatalf("second claimer: ok %v, %v", ok, err)
	}
}

// A thread lock whose SET NX reply is lost after Redis ran it, sent again,
// is ours: the retry found our own token, and the lock waited for its TTL.
func TestLostReplyThreadLockIsOurs(t *testing.T) {
	p, rdb, _, k := lostReply(t)
	th := Threads{RDB: rdb, Keys: k}
	f := p.DropReply(faultproxy.Command("set", k.ThreadLock(ThreadOf{Hash: "h1"})))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	unlock, err := th.Lock(ctx, ThreadOf{Hash: "h1"}, time.Minute)
	if err != nil {
		t.Fatalf("lock with its reply lost: %v", err)
	}
	fired(t, f)
	unlock()
	if _, err := th.Lock(ctx, ThreadOf{Hash: "h1"}, time.Minute); err != nil {
		t.Fatalf("lock again after unlock: %v", err)
	}
}

// A take of a parking record whose reply is lost after Redis ran it, sent
// again, still says the turn was woken meanwhile (else it waits for its
// recheck, minutes, instead of running now).
func TestLostReplyParkTakeSaysWoken(t *testing.T) {
	p, rdb, direct, k := lostReply(t)
	ctx := context.Background()
	st := Parking{RDB: rdb, Keys: k}
	pk := Parked{TaskID: "t1", Type: "turn", Payload: []byte("{}"), Queue: "default", Since: time.Now(), Gen: "g1"}
	if err := (Parking{RDB: direct, Keys: k}).Park(ctx, pk); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.Wake(ctx, "t1"); !ok || err != nil {
		t.Fatalf("wake: %v %v", ok, err)
	}
	f := p.DropReply(scriptOn(k.Park().Record("t1")))
	tk, err := st.Take(ctx, "t1", "g1")
	if err != nil {
		t.Fatal(err)
	}
	fired(t, f)
	if !tk.Found || !tk.Woken {
		t.Fatalf("take with its reply lost = %+v; want found and woken", tk)
	}
	if tk, err := st.Take(ctx, "t1", "g1"); tk.Found || err != nil {
		t.Fatalf("a second take = %+v, %v; want none", tk, err)
	}
}

// A beat whose reply is lost after Redis ran it, sent again, still tells
// the worker the turns another runner took from it (the first run emptied
// the lost set: the worker kept running them beside their new runner) and
// that the registry had lost it.
func TestLostReplyBeatTellsTaken(t *testing.T) {
	p, rdb, direct, k := lostReply(t)
	ctx := context.Background()
	st := NewTakeover(rdb, k)
	other := NewTakeover(direct, k)
	reg := func(s *Takeover, inst, runner string) {
		t.Helper()
		if err := s.Register(ctx, Registration{Instance: inst, TaskID: "t1", Runner: runner, Entry: []byte(`{}`),
			HolderTTL: time.Minute, LostTTL: time.Minute, After: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	reg(other, "me", "r1")
	reg(other, "you", "r2") // takes t1 from me
	f := p.DropReply(scriptOn(k.Takeover().Lost("me")))
	b, err := st.Beat(ctx, "me", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fired(t, f)
	if len(b.Taken) != 1 || b.Taken[0].TaskID != "t1" || !b.Lost {
		t.Fatalf("beat with its reply lost = %+v; want t1 taken, and the registry lost", b)
	}
	if b, err := st.Beat(ctx, "me", time.Hour); err != nil || len(b.Taken) != 0 || b.Lost {
		t.Fatalf("the next beat = %+v, %v; want nothing taken, not lost", b, err)
	}
}
