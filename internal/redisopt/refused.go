package redisopt

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TryAgainFor bounds how long a lean cluster client repeats a command that
// Redis refused with TRYAGAIN. A node answers TRYAGAIN to a script, MULTI
// or multi-key command whose keys a slot migration has split between the
// source and the target (some moved, some not), and keeps answering it
// until the last of them moved: for as long as the slot's migration lasts,
// seconds for a slot that holds a shard's keys (redis-cli --cluster
// reshard moves 10 keys a MIGRATE). go-redis repeats it MaxRedirects times
// (3) within ~0.1s, then returns it: a worker's journal save or reply
// emit failed, and so did Asynq's move of the task to retry or completed,
// which Asynq v0.26's syncer then repeats with a context already cancelled,
// leaving the turn active until Asynq's recoverer finds its lease expired,
// one to two minutes on.
const TryAgainFor = 10 * time.Second

// tryAgainFirst and tryAgainMax are the first and the longest wait before
// a command refused with TRYAGAIN is sent again (the wait doubles).
const (
	tryAgainFirst = 10 * time.Millisecond
	tryAgainMax   = 200 * time.Millisecond
)

// tryAgain is the hook of a lean cluster client that sends again, for up to
// TryAgainFor (and within the caller's context), what Redis refused with
// TRYAGAIN. A refused command was not run, so sending it again runs it
// once: a command alone is sent again, a pipeline's refused commands are
// sent again (the others ran), a MULTI … EXEC refused in any of its
// commands was not run at all and is sent again whole. Once refused, a
// command is sent again as long as it is not run (notRun), until it runs
// or TryAgainFor has passed.
type tryAgain struct{}

// DialHook is redis.Hook's.
func (tryAgain) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's.
func (tryAgain) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if !redis.IsTryAgainError(err) {
			return err
		}
		retry := newTryAgainWait()
		for notRun(err) && retry.wait(ctx) {
			err = next(ctx, cmd)
		}
		return err
	}
}

// ProcessPipelineHook is redis.Hook's (pipelines and MULTI … EXEC).
func (tryAgain) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			if !redis.IsTryAgainError(err) && len(refusedCmds(cmds)) == 0 {
				return err
			}
			retry := newTryAgainWait()
			for (notRun(err) || len(notRunCmds(cmds)) > 0) && retry.wait(ctx) {
				err = next(ctx, cmds)
			}
			return err
		}
		refused := refusedCmds(cmds)
		if len(refused) == 0 {
			return err
		}
		retry := newTryAgainWait()
		for len(refused) > 0 && retry.wait(ctx) {
			// One at a time, in order: go-redis sends a node's whole batch
			// again when its first command meets TRYAGAIN, and a command
			// of it that met ASK or MOVED then goes to two nodes at once.
			for _, c := range refused {
				_ = next(ctx, []redis.Cmder{c})
			}
			refused = notRunCmds(refused)
		}
		for _, c := range cmds { // the pipeline's error: its first command's that failed
			if c.Err() != nil {
				return c.Err()
			}
		}
		return nil
	}
}

// refusedCmds returns the commands of cmds refused with TRYAGAIN.
func refusedCmds(cmds []redis.Cmder) []redis.Cmder {
	var refused []redis.Cmder
	for _, c := range cmds {
		if redis.IsTryAgainError(c.Err()) {
			refused = append(refused, c)
		}
	}
	return refused
}

// notRunCmds returns the commands of cmds that Redis did not run (notRun).
func notRunCmds(cmds []redis.Cmder) []redis.Cmder {
	var left []redis.Cmder
	for _, c := range cmds {
		if notRun(c.Err()) {
			left = append(left, c)
		}
	}
	return left
}

// notRun reports whether err is a cluster node's refusal to run a command:
// TRYAGAIN, or the MOVED or ASK that a command sent again meets once the
// migration ended, or as it ends (go-redis follows them, but may return
// one, its redirects spent): the command is sent again.
func notRun(err error) bool {
	if err == nil {
		return false
	}
	if redis.IsTryAgainError(err) {
		return true
	}
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ")
}

// tryAgainWait paces the repeats of one refused command: doubling waits
// from tryAgainFirst up to tryAgainMax, until TryAgainFor has passed.
type tryAgainWait struct {
	until time.Time
	next  time.Duration
}

func newTryAgainWait() *tryAgainWait {
	return &tryAgainWait{until: time.Now().Add(TryAgainFor), next: tryAgainFirst}
}

// wait sleeps before the next repeat and reports whether to make it: false
// once TryAgainFor has passed or ctx ended.
func (w *tryAgainWait) wait(ctx context.Context) bool {
	d := min(w.next, time.Until(w.until))
	if d <= 0 {
		return false
	}
	w.next = min(2*w.next, tryAgainMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
