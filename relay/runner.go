package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/internal/store"
)

// RunConfig configures Run: how a replica shares the chats with the others.
type RunConfig struct {
	// ID names this replica (default: random).
	ID string
	// Shards is how many shards the chats are spread over; every replica must
	// use the same number (default 64).
	Shards int
	// LeaseTTL is how long a shard stays with a replica that stopped renewing
	// it: a dead replica's chats are taken over within about this (default 5s).
	LeaseTTL time.Duration
	// Workers is how many chats are drained at once (default 32).
	Workers int
	// Poll is the longest a marked chat waits when no wake-up came (default 1s).
	Poll time.Duration
}

func (rc *RunConfig) defaults() {
	if rc.ID == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		rc.ID = "relay-" + hex.EncodeToString(b)
	}
	if rc.Shards <= 0 {
		rc.Shards = 64
	}
	if rc.LeaseTTL <= 0 {
		rc.LeaseTTL = 5 * time.Second
	}
	if rc.Workers <= 0 {
		rc.Workers = 32
	}
	if rc.Poll <= 0 {
		rc.Poll = time.Second
	}
}

// Mark records that c has new reply events, for whichever replica holds its
// shard (Notifier calls it for every event; a caller that writes a reply
// stream itself may call it too).
func (r *Relay) Mark(ctx context.Context, c record.Conversation, shards int) error {
	if shards <= 0 {
		shards = 64
	}
	return r.st.Mark(ctx, c, shards)
}

// shardLease is one shard this replica holds.
type shardLease struct {
	token   string
	until   atomic.Int64 // unix ns
	leaving bool
	busy    int // drains in flight
}

// timer is when a chat needs a drain with no news (a throttled edit, a
// typing refresh), and the version of the mark its drain saw: a mark with a
// higher version is news, drained at once.
type timer struct {
	at      time.Time
	version float64
}

// runner is one replica's loops: shards (lease, renew, share), dispatch
// (wake-ups, marks, timers) and the workers that drain chats.
type runner struct {
	r  *Relay
	rc RunConfig

	mu       sync.Mutex
	held     map[int]*shardLease
	inflight map[record.Conversation]bool
	timers   map[record.Conversation]timer
	jobs     []chan store.DirtyChat
	kick     chan struct{}
	healthy  atomic.Int64 // unix ns of the last successful lease round
}

// Run shares the chats with the other replicas and drains this replica's
// until ctx ends; then it gives its shards up (after the drains in flight)
// so that another replica takes them at once.
func (r *Relay) Run(ctx context.Context, rc RunConfig) error {
	rc.defaults()
	rn := &runner{r: r, rc: rc, held: map[int]*shardLease{}, inflight: map[record.Conversation]bool{},
		timers: map[record.Conversation]timer{}, kick: make(chan struct{}, 1)}
	r.mu.Lock()
	r.run = rn
	r.mu.Unlock()
	var wg sync.WaitGroup
	for i := 0; i < rc.Workers; i++ {
		ch := make(chan store.DirtyChat, 64)
		rn.jobs = append(rn.jobs, ch)
		wg.Add(1)
		go func() { defer wg.Done(); rn.work(ctx, ch) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); rn.dispatch(ctx) }()
	rn.shards(ctx)
	wg.Wait()
	bg := context.WithoutCancel(ctx)
	rn.mu.Lock()
	for sh, l := range rn.held {
		_ = r.st.ReleaseShard(bg, sh, l.token)
	}
	rn.mu.Unlock()
	_ = r.st.Leave(bg, rc.ID)
	return nil
}

// Ready reports whether Run's last lease round reached Redis recently.
func (r *Relay) Ready() error {
	r.mu.Lock()
	rn := r.run
	r.mu.Unlock()
	if rn == nil {
		return errors.New("relay: not running")
	}
	last := time.Unix(0, rn.healthy.Load())
	if time.Since(last) > 2*rn.rc.LeaseTTL/5+rn.rc.Poll {
		return errors.New("relay: no lease round reached Redis since " + last.UTC().Format(time.RFC3339))
	}
	return nil
}

// HeldShards returns the shards this replica holds now.
func (r *Relay) HeldShards() []int {
	r.mu.Lock()
	rn := r.run
	r.mu.Unlock()
	if rn == nil {
		return nil
	}
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var out []int
	for sh, l := range rn.held {
		if !l.leaving {
			out = append(out, sh)
		}
	}
	return out
}

// shards is the lease loop: every LeaseTTL/5 it beats, renews what it holds
// (a shard it lost is dropped from memory), takes free shards up to its share
// (ceil(shards / live replicas)) and gives back what is over it once its
// drains end.
func (rn *runner) shards(ctx context.Context) {
	tick := time.NewTicker(rn.rc.LeaseTTL / 5)
	defer tick.Stop()
	start := int(fnv32(rn.rc.ID) % uint32(rn.rc.Shards))
	for {
		rn.round(ctx, start)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (rn *runner) round(ctx context.Context, start int) {
	st, ttl := rn.r.st, rn.rc.LeaseTTL
	live, err := st.Beat(ctx, rn.rc.ID, time.Now(), ttl)
	if err != nil {
		rn.r.log.Warn("relay: beat failed", "err", err)
		return
	}
	share := (rn.rc.Shards + int(live) - 1) / int(max(live, 1))
	rn.mu.Lock()
	held := make(map[int]*shardLease, len(rn.held))
	for k, v := range rn.held {
		held[k] = v
	}
	rn.mu.Unlock()
	ok := true
	for sh, l := range held {
		renewedAt := time.Now()
		kept, err := st.RenewShard(ctx, sh, l.token, ttl)
		if err != nil {
			ok = false
			continue
		}
		if !kept {
			rn.lose(sh)
			continue
		}
		l.until.Store(renewedAt.Add(ttl).UnixNano())
	}
	rn.mu.Lock()
	n := 0
	for _, l := range rn.held {
		if !l.leaving {
			n++
		}
	}
	// Give back what is over the share, once its drains are done.
	for sh, l := range rn.held {
		if n > share && !l.leaving {
			l.leaving = true
			n--
		}
		if l.leaving && l.busy == 0 {
			delete(rn.held, sh)
			rn.r.dropShard(sh, rn.rc.Shards)
			_ = st.ReleaseShard(ctx, sh, l.token)
		}
	}
	rn.mu.Unlock()
	for i := 0; i < rn.rc.Shards && n < share; i++ {
		sh := (start + i) % rn.rc.Shards
		rn.mu.Lock()
		_, have := rn.held[sh]
		rn.mu.Unlock()
		if have {
			continue
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		token := rn.rc.ID + ":" + hex.EncodeToString(b)
		at := time.Now()
		got, err := st.AcquireShard(ctx, sh, token, ttl)
		if err != nil {
			ok = false
			break
		}
		if got {
			l := &shardLease{token: token}
			l.until.Store(at.Add(ttl).UnixNano())
			rn.mu.Lock()
			rn.held[sh] = l
			rn.mu.Unlock()
			n++
			rn.r.log.Info("relay: shard taken", "shard", sh, "replica", rn.rc.ID)
			rn.wake()
		}
	}
	if ok {
		rn.healthy.Store(time.Now().UnixNano())
	}
}

// lose forgets a shard another replica holds now.
func (rn *runner) lose(sh int) {
	rn.mu.Lock()
	delete(rn.held, sh)
	rn.mu.Unlock()
	rn.r.dropShard(sh, rn.rc.Shards)
	rn.r.log.Warn("relay: shard lost to another replica", "shard", sh, "replica", rn.rc.ID)
}

func (rn *runner) wake() {
	select {
	case rn.kick <- struct{}{}:
	default:
	}
}

// dispatch hands marked and due chats of the held shards to the workers, one
// drain per chat at a time; it waits in one BLPOP over all held shards.
func (rn *runner) dispatch(ctx context.Context) {
	defer func() {
		for _, j := range rn.jobs {
			close(j)
		}
	}()
	for ctx.Err() == nil {
		shards := rn.active()
		if len(shards) > 0 {
			all, err := rn.r.st.DirtyAll(ctx, shards, 1000)
			if err != nil && ctx.Err() == nil {
				rn.r.log.Warn("relay: read marks failed", "err", err)
			}
			for _, sh := range shards {
				for _, d := range all[sh] {
					rn.offer(ctx, sh, d)
				}
			}
		}
		wait := rn.rc.Poll
		if len(shards) == 0 {
			select {
			case <-ctx.Done():
			case <-rn.kick:
			case <-time.After(wait):
			}
			continue
		}
		rn.mu.Lock()
		now := time.Now()
		for _, tm := range rn.timers {
			if d := tm.at.Sub(now); d < wait {
				wait = max(d, time.Millisecond)
			}
		}
		rn.mu.Unlock()
		if err := rn.r.st.Wait(ctx, shards, wait); err != nil && ctx.Err() == nil {
			rn.r.log.Warn("relay: wait failed", "err", err)
			time.Sleep(wait)
		}
	}
}

func (rn *runner) active() []int {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	var out []int
	for sh, l := range rn.held {
		if !l.leaving {
			out = append(out, sh)
		}
	}
	return out
}

// offer sends d to its worker unless it is being drained, or waits for a
// time of its own (a throttled edit, a typing refresh) that has not come and
// no event came since its last drain (a new event is applied at once; the
// drain itself puts off what must wait, such as an edit).
func (rn *runner) offer(ctx context.Context, sh int, d store.DirtyChat) {
	rn.mu.Lock()
	l := rn.held[sh]
	if l == nil || l.leaving || rn.inflight[d.Chat] {
		rn.mu.Unlock()
		return
	}
	if tm, ok := rn.timers[d.Chat]; ok && time.Now().Before(tm.at) && d.Version <= tm.version {
		rn.mu.Unlock()
		return
	}
	rn.inflight[d.Chat] = true
	l.busy++
	rn.mu.Unlock()
	select {
	case rn.jobs[fnv32(d.Chat.Integration+"\x00"+d.Chat.ChatID)%uint32(len(rn.jobs))] <- d:
	case <-ctx.Done():
	}
}

// work drains the chats it is given; a chat with something left to do later
// stays marked and gets a timer; one that is done is cleaned and forgotten.
func (rn *runner) work(ctx context.Context, jobs <-chan store.DirtyChat) {
	for d := range jobs {
		sh := store.Shard(d.Chat, rn.rc.Shards)
		rn.mu.Lock()
		l := rn.held[sh]
		rn.mu.Unlock()
		var next time.Time
		var err error
		if l != nil && ctx.Err() == nil {
			// No send in the last third of the lease: a paused replica
			// stops sending well before another can take the shard.
			until := time.Unix(0, l.until.Load()).Add(-rn.rc.LeaseTTL / 3)
			next, err = rn.r.Drain(ctx, d.Chat, Lease{Key: rn.r.st.ShardKey(sh), Token: l.token, Until: until})
			switch {
			case err != nil:
				rn.r.log.Warn("relay: drain failed; tried again", "chat", d.Chat.String(), "err", err)
				next = time.Now().Add(time.Second)
			case next.IsZero():
				if err := rn.r.st.Clean(ctx, d, rn.rc.Shards); err != nil {
					next = time.Now().Add(time.Second)
				} else {
					rn.r.Release(d.Chat)
				}
			}
		}
		rn.mu.Lock()
		delete(rn.inflight, d.Chat)
		if next.IsZero() {
			delete(rn.timers, d.Chat)
		} else {
			rn.timers[d.Chat] = timer{at: next, version: d.Version}
		}
		if l != nil {
			l.busy--
		}
		rn.mu.Unlock()
	}
}

// dropShard forgets the chats of shard in memory (another replica holds them).
func (r *Relay) dropShard(shard, shards int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.chats {
		if store.Shard(c, shards) == shard {
			delete(r.chats, c)
		}
	}
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}
