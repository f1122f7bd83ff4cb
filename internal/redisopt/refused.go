package redisopt

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RefusedRetryFor bounds how long a lean cluster client sends again a
// command that was refused without being run, go-redis's own few repeats
// spent (MaxRedirects, 3, within ~0.1s). Two faults of a cluster refuse
// commands for seconds:
//
//   - A slot migration: a node answers TRYAGAIN to a script, MULTI or
//     multi-key command whose keys the migration has split between the
//     source and the target (some moved, some not), until the last of them
//     moved: seconds for a slot that holds a shard's keys (redis-cli
//     --cluster reshard moves 10 keys a MIGRATE).
//   - A master that died: until its replica is promoted (the node timeout,
//     then an election: ~4s with the tests' 1.5s node timeout), connecting
//     to its address is refused, and once the others mark it failed every
//     node answers CLUSTERDOWN to every command with a key.
//
// Without this, a worker's journal save or reply emit failed, and so did
// Asynq's move of the task to retry or completed, which Asynq v0.26's
// syncer then repeats with a context already cancelled, leaving the turn
// active until Asynq's recoverer finds its lease expired, one to two
// minutes on (and the chat's next messages wait behind it).
const RefusedRetryFor = 10 * time.Second

// refusedRetryFirst and refusedRetryMax are the first and the longest wait
// before a refused command is sent again (the wait doubles).
const (
	refusedRetryFirst = 10 * time.Millisecond
	refusedRetryMax   = 200 * time.Millisecond
)

// resendRefused is the hook of a lean cluster client that sends again, for
// up to RefusedRetryFor (and within the caller's context), what a cluster
// refused without running it (refused: TRYAGAIN, CLUSTERDOWN, a connection
// that could not be made). A refused command was not run, so sending it
// again runs it once: a command alone is sent again, a pipeline's refused
// commands are sent again (the others ran), a MULTI … EXEC refused in any
// of its commands was not run at all and is sent again whole. Once
// refused, a command is sent again as long as it is not run (notRun),
// until it runs or RefusedRetryFor has passed.
//
// go-redis repeats a command on its own, also after an error that leaves
// it unknown whether the command ran (a connection closed or timed out
// after the command was written, its reply lost), and it reports only the
// last attempt's error. So a command is sent again only if no attempt of
// it, go-redis's included, may have run: the node clients' hook
// (nodeAttempts) writes down, in the call's sendLog, each attempt that was
// not a refusal.
type resendRefused struct{}

// DialHook is redis.Hook's.
func (resendRefused) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's.
func (resendRefused) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, log := withSendLog(ctx, cmd)
		err := next(ctx, cmd)
		if !refused(err) || log.mayHaveRun(cmd) {
			return err
		}
		retry := newRefusedWait()
		for notRun(err) && !log.mayHaveRun(cmd) && retry.wait(ctx) {
			err = next(ctx, cmd)
		}
		return err
	}
}

// ProcessPipelineHook is redis.Hook's (pipelines and MULTI … EXEC).
func (resendRefused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, log := withSendLog(ctx, nil)
		err := next(ctx, cmds)
		if len(cmds) > 0 && cmds[0].Name() == "multi" {
			if !refused(err) && len(refusedCmds(cmds, log)) == 0 || log.anyMayHaveRun(cmds) {
				return err
			}
			retry := newRefusedWait()
			for (notRun(err) || len(notRunCmds(cmds, log)) > 0) && !log.anyMayHaveRun(cmds) && retry.wait(ctx) {
				clearErrs(cmds)
				err = next(ctx, cmds)
			}
			return err
		}
		left := refusedCmds(cmds, log)
		if len(left) == 0 {
			return err
		}
		retry := newRefusedWait()
		for len(left) > 0 && retry.wait(ctx) {
			// One at a time, in order: go-redis sends a node's whole batch
			// again when its first command meets TRYAGAIN or CLUSTERDOWN,
			// and a command of it that met ASK or MOVED then goes to two
			// nodes at once.
			for _, c := range left {
				clearErrs([]redis.Cmder{c})
				_ = next(ctx, []redis.Cmder{c})
			}
			left = notRunCmds(left, log)
		}
		for _, c := range cmds { // the pipeline's error: its first command's that failed
			if c.Err() != nil {
				return c.Err()
			}
		}
		return nil
	}
}

// clearErrs clears the errors of cmds before they are sent again: go-redis
// sets an error on a command of a pipeline only where none is set, so an
// old refusal would otherwise outlive an attempt that failed otherwise.
func clearErrs(cmds []redis.Cmder) {
	for _, c := range cmds {
		c.SetErr(nil)
	}
}

// refusedCmds returns the commands of cmds that were refused (refused) and
// that no attempt may have run (log).
func refusedCmds(cmds []redis.Cmder, log *sendLog) []redis.Cmder {
	var out []redis.Cmder
	for _, c := range cmds {
		if refused(c.Err()) && !log.mayHaveRun(c) {
			out = append(out, c)
		}
	}
	return out
}

// notRunCmds returns the commands of cmds that Redis did not run (notRun)
// and that no attempt may have run (log).
func notRunCmds(cmds []redis.Cmder, log *sendLog) []redis.Cmder {
	var left []redis.Cmder
	for _, c := range cmds {
		if notRun(c.Err()) && !log.mayHaveRun(c) {
			left = append(left, c)
		}
	}
	return left
}

// refused reports whether err proves that the command it ended was not
// run, for a reason that lasts while a cluster heals:
//
//   - TRYAGAIN: a slot migration split the command's keys;
//   - CLUSTERDOWN: the cluster is down (a master failed and is not yet
//     replaced) or the command's slot is served by no node; Redis answers
//     it before running anything (a script that meets a down cluster from
//     inside fails with an ERR, not with CLUSTERDOWN), and a MULTI that
//     met it in any of its commands is discarded at EXEC;
//   - a failed dial (connection refused, or no answer within DialTimeout):
//     no connection, so nothing was written. go-redis also returns its
//     last dial error at once while dials to an address keep failing.
func refused(err error) bool {
	if err == nil {
		return false
	}
	if redis.IsTryAgainError(err) || redis.IsClusterDownError(err) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// notRun reports whether err proves that the command was not run: refused,
// or the MOVED or ASK that a command sent again meets once the cluster
// changed (a slot migrated, a replica promoted), which go-redis follows
// but may return, its redirects spent: the command is sent again.
func notRun(err error) bool {
	if err == nil {
		return false
	}
	if refused(err) {
		return true
	}
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ")
}

// sendLog is what one call through resendRefused learnt from its node
// attempts: which of its commands may have run (an attempt answered it,
// not with a refusal, or its connection failed after it was written).
// Commands are told by identity: go-redis sends the caller's own, but for
// a command it sends to several nodes (a command for all shards, or keys
// of several slots), in copies of the same name, and for the commands it
// sends of its own with the caller's context (HELLO and CLIENT on a new
// connection, ASKING, COMMAND, CLUSTER SLOTS), which are none of the
// caller's.
type sendLog struct {
	one    redis.Cmder // the call's command, when the call is of one
	mu     sync.Mutex
	oneRan bool                 // one, or a copy of it, may have run
	ran    map[redis.Cmder]bool // those of a pipeline's that may have run
}

type sendLogKey struct{}

// withSendLog returns ctx with a new sendLog for a call, of one command
// (one) or of a pipeline (one nil).
func withSendLog(ctx context.Context, one redis.Cmder) (context.Context, *sendLog) {
	l := &sendLog{one: one}
	return context.WithValue(ctx, sendLogKey{}, l), l
}

// mark writes down that c may have run.
func (l *sendLog) mark(c redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.one != nil {
		l.oneRan = l.oneRan || c == l.one || c.Name() == l.one.Name()
		return
	}
	if l.ran == nil {
		l.ran = map[redis.Cmder]bool{}
	}
	l.ran[c] = true
}

// mayHaveRun reports whether c may have run.
func (l *sendLog) mayHaveRun(c redis.Cmder) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c == l.one {
		return l.oneRan
	}
	return l.ran[c]
}

// anyMayHaveRun reports whether one of cmds may have run.
func (l *sendLog) anyMayHaveRun(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if l.mayHaveRun(c) {
			return true
		}
	}
	return false
}

// nodeAttempts is the hook of a lean cluster client's node clients: of
// each attempt go-redis makes on a node within a call of resendRefused,
// it writes down in the call's sendLog the commands that may have run.
type nodeAttempts struct{}

// DialHook is redis.Hook's.
func (nodeAttempts) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's. A command alone may have run unless its
// attempt was refused (notRun); a copy of it that go-redis sends to each
// of several nodes (a command for all shards) counts as the command.
func (nodeAttempts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if l, ok := ctx.Value(sendLogKey{}).(*sendLog); ok && !notRun(err) {
			l.mark(cmd)
		}
		return err
	}
}

// ProcessPipelineHook is redis.Hook's (a node's part of a pipeline, a
// transaction, a command sent with ASKING).
func (nodeAttempts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		l, ok := ctx.Value(sendLogKey{}).(*sendLog)
		if !ok || err == nil && !anyErr(cmds) {
			// A pipeline that ran whole, or a transaction that ran or
			// whose EXEC was refused (go-redis sets no error on its
			// commands then): nothing to write down.
			return err
		}
		if ambiguous(err) { // written, and then the connection failed
			for _, c := range cmds {
				l.mark(c)
			}
			return err
		}
		if isTx(cmds) {
			// Every reply was read: an EXEC refused or aborted ran none of
			// the commands, and one that answered ran them all and ends
			// the call.
			return err
		}
		// Every reply was read: a command answered, not refused, ran. One
		// answered without an error matters too: go-redis sends a node's
		// whole batch again when its first command was refused.
		for _, c := range cmds {
			if !notRun(c.Err()) {
				l.mark(c)
			}
		}
		return err
	}
}

func isTx(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Name() == "multi" {
			return true
		}
	}
	return false
}

func anyErr(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if c.Err() != nil {
			return true
		}
	}
	return false
}

// ambiguous reports whether err, ending a node attempt, leaves it unknown
// whether Redis ran what was written: neither a Redis reply nor a failed
// dial (nothing was written).
func ambiguous(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// refusedWait paces the repeats of one refused command: doubling waits
// from refusedRetryFirst up to refusedRetryMax, until RefusedRetryFor has
// passed.
type refusedWait struct {
	until time.Time
	next  time.Duration
}

func newRefusedWait() *refusedWait {
	return &refusedWait{until: time.Now().Add(RefusedRetryFor), next: refusedRetryFirst}
}

// wait sleeps before the next repeat and reports whether to make it: false
// once RefusedRetryFor has passed or ctx ended.
func (w *refusedWait) wait(ctx context.Context) bool {
	d := min(w.next, time.Until(w.until))
	if d <= 0 {
		return false
	}
	w.next = min(2*w.next, refusedRetryMax)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
