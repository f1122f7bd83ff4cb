package ordering

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ReleaseCmd is Release for a caller that sends the release in a pipeline
// of its own, with other writes (one round trip for a turn's last writes):
// it stops the renewal (waiting for one in flight) and returns the
// release's command and how to read its reply (the task now at the head of
// the line, "" when the line is empty). cmd makes the command: EVALSHA of
// the release's script, or with sha false EVAL (for a Redis that does not
// have the script: its EVALSHA failed with NOSCRIPT). If it could not run,
// Release may still be called: releasing twice is harmless.
func (l *Lease) ReleaseCmd(done bool) (cmd func(ctx context.Context, sha bool) *redis.Cmd, next func(*redis.Cmd) (string, error)) {
	return l.ReleaseCmdAfter(done, "")
}

// ErrNotReleased is ReleaseCmdAfter's reading of a release that did not
// happen: the key it waits for did not exist. Nothing was changed; the lease
// is still to be released (Release).
var ErrNotReleased = errors.New("ordering: not released: the write it waits for is not there")

// ReleaseCmdAfter is ReleaseCmd for a release that must happen only after
// another write of the same pipeline: the release runs only when the key
// after exists (a turn's final event's marker, written with the event), else
// it changes nothing and next returns ErrNotReleased. A pipeline's commands
// each run on their own: without this, a release sent after a final event
// whose write failed let go of the turn's place all the same.
// after must be on the same Redis (on a cluster, in the line's slot); ""
// releases unconditionally.
func (l *Lease) ReleaseCmdAfter(done bool, after string) (cmd func(ctx context.Context, sha bool) *redis.Cmd, next func(*redis.Cmd) (string, error)) {
	l.stopRenewal()
	args := l.releaseArgs(done, after)
	return func(ctx context.Context, sha bool) *redis.Cmd {
			return releaseLua.Cmd(ctx, args, sha)
		}, func(c *redis.Cmd) (string, error) {
			res, err := c.Slice()
			if err != nil {
				return "", fmt.Errorf("ordering: release %s on %q: %w", l.taskID, l.key, err)
			}
			if str(res, 2) == "missing" {
				return "", fmt.Errorf("%w (release %s on %q: %s)", ErrNotReleased, l.taskID, l.key, after)
			}
			return str(res, 0), nil
		}
}

// releaseArgs is the command of releaseLua for l (after: see
// ReleaseCmdAfter).
func (l *Lease) releaseArgs(done bool, after string) []any {
	d := "0"
	if done {
		d = "1"
	}
	if after != "" {
		return append(releaseLua.Args(4, 4), l.s.lineKey(l.key), l.lock, l.s.doneKey(l.key, l.taskID), after,
			l.taskID, l.token, d, l.s.doneTTLArg)
	}
	return append(releaseLua.Args(3, 4), l.s.lineKey(l.key), l.lock, l.s.doneKey(l.key, l.taskID),
		l.taskID, l.token, d, l.s.doneTTLArg)
}
