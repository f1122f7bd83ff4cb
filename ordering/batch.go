package ordering

import (
	"context"
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
	l.stopRenewal()
	args := l.releaseArgs(done)
	return func(ctx context.Context, sha bool) *redis.Cmd {
			return releaseLua.Cmd(ctx, args, sha)
		}, func(c *redis.Cmd) (string, error) {
			res, err := c.Slice()
			if err != nil {
				return "", fmt.Errorf("ordering: release %s on %q: %w", l.taskID, l.key, err)
			}
			return str(res, 0), nil
		}
}

// releaseArgs is the command of releaseLua for l.
func (l *Lease) releaseArgs(done bool) []any {
	d := "0"
	if done {
		d = "1"
	}
	return append(releaseLua.Args(3, 4), l.s.lineKey(l.key), l.lock, l.s.doneKey(l.key, l.taskID),
		l.taskID, l.token, d, l.s.doneTTLArg)
}
