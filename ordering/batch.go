package ordering

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ReleaseScript is Release for a caller that sends the release in a
// pipeline of its own, with other writes (one round trip for a turn's last
// writes): it stops the renewal (waiting for one in flight) and returns the
// script, its keys and arguments, and how to read the reply (the task now
// at the head of the line, "" when the line is empty). The caller runs the
// script (EVALSHA, or EVAL when Redis does not have it). If it could not
// run, Release may still be called: releasing twice is harmless.
func (l *Lease) ReleaseScript(done bool) (s *redis.Script, keys []string, args []any, next func(*redis.Cmd) (string, error)) {
	l.stopRenewal()
	d := "0"
	if done {
		d = "1"
	}
	keys = []string{l.s.lineKey(l.key), l.s.lockKey(l.key), l.s.doneKey(l.key, l.taskID)}
	args = []any{l.taskID, l.token, d, l.s.cfg.DoneTTL.Milliseconds()}
	return releaseLua, keys, args, func(c *redis.Cmd) (string, error) {
		res, err := c.Slice()
		if err != nil {
			return "", fmt.Errorf("ordering: release %s on %q: %w", l.taskID, l.key, err)
		}
		return str(res, 0), nil
	}
}
