package line

import (
	"context"
	"log/slog"
	"time"
)

// A wake-up or a release that Redis fails is tried again. The turn it is for waits for
// it: nothing else runs the turn before its safety net (Config.Recheck,
// ten minutes by default). A wake-up fails when a Redis it needs does not
// answer for a moment: on Redis Cluster a master failing over (seconds,
// cluster-node-timeout and an election), and every wake-up reads Asynq's
// one global key (asynq:queues, which each Inspector call checks), so one
// master's failover fails the wake-ups of every chat, whatever its slot.
// Waking is idempotent (a task already pending, running or done is left
// alone; one woken while not its turn parks again), so trying again is
// safe. A release is too (it deletes the lock only while it is the
// attempt's, and takes a finished turn out of its line once): one that
// fails leaves its line with a head that never releases, and the turn
// behind it unwoken, until its task runs again, which Asynq may only do
// once the task's lease expired (a minute or two) when Redis failed its
// move to the retries as well.

// Rewake bounds of a wake-up that failed.
const (
	// RewakeFor is how long a failed wake-up is tried again: longer than a
	// Redis Cluster failover with the default cluster-node-timeout (15s)
	// and a Redis restart.
	RewakeFor       = time.Minute
	rewakeFirst     = 100 * time.Millisecond
	rewakeMaxPause  = 2 * time.Second
	rewakeAttemptIn = 5 * time.Second // each try's bound
)

// Wake wakes taskID, which waits in key's line, now (WakeTask); when that
// fails it is tried again in the background (tryAgain). log is the
// caller's logger (the attempt's; nil: Lines'); what says which wake-up it
// is.
func (l *Lines) Wake(ctx context.Context, log *slog.Logger, what, queue, key, taskID string) {
	err := l.WakeTask(ctx, queue, key, taskID)
	if err == nil {
		return
	}
	if log == nil {
		log = l.cfg.Log
	}
	log.Debug("could not wake "+what+"; trying again", "next", taskID, "error", err.Error())
	l.tryAgain(log.With("next", taskID), "wake "+what+" (it runs at its wait check)", func(ctx context.Context) error {
		return l.WakeTask(ctx, queue, key, taskID)
	})
}

// releaseLater tries p's release again in the background (tryAgain), and
// wakes the next turn once a finished turn (done) left its line.
func (l *Lines) releaseLater(p *Place, done bool) {
	p.a.Log.Debug("could not release the conversation; trying again", "key", p.a.Key)
	l.tryAgain(p.a.Log.With("key", p.a.Key), "release the conversation (the turn's next attempt does)", func(ctx context.Context) error {
		next, err := p.lease.Release(ctx, done)
		if err == nil && done {
			p.wake(ctx, next)
		}
		return err
	})
}

// tryAgain calls try in the background, with backoff from 100ms to 2s,
// until it succeeds, RewakeFor passed or Lines is closed; what it could
// not do is logged as a warning (what: the action, and who does it
// instead).
func (l *Lines) tryAgain(log *slog.Logger, what string, try func(ctx context.Context) error) {
	l.pending.Add(1)
	go func() {
		defer l.pending.Done()
		deadline := time.Now().Add(RewakeFor)
		pause := rewakeFirst
		for tries := 1; ; tries++ {
			t := time.NewTimer(pause)
			select {
			case <-l.closed:
				t.Stop()
				log.Warn("could not "+what+" before the worker stopped", "tries", tries)
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), rewakeAttemptIn)
			err := try(ctx)
			cancel()
			if err == nil {
				log.Debug("did "+what+" on a later try", "tries", tries+1)
				return
			}
			if time.Now().After(deadline) {
				log.Warn("could not "+what, "tries", tries+1, "error", err.Error())
				return
			}
			pause = min(2*pause, rewakeMaxPause)
		}
	}()
}
