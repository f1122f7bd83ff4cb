package ordering

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// joinFrontLua: KEYS[1]=line, KEYS[2]=done marker of task, KEYS[3]=merged
// marker of task; ARGV[1]=task, ARGV[2]=nowMs. Like joinLua (but it returns
// the position alone), and a new member goes before every other.
var joinFrontLua = redis.NewScript(`
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then return -1 end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  local sc = tonumber(ARGV[2]) * 1000
  local low = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if low[2] and tonumber(low[2]) <= sc then sc = tonumber(low[2]) - 1 end
  redis.call('ZADD', KEYS[1], 'NX', string.format('%.0f', sc), ARGV[1])
end
return redis.call('ZRANK', KEYS[1], ARGV[1])
`)

// JoinFront puts taskID at the head of key's line, before the turns that
// wait there (the answer to an approval request, which every later message
// of the conversation waits for). The task holding the lock keeps it until
// it releases. Joining again keeps the place; a finished task (Release with
// done) or one merged into another turn does not join: JoinFront returns -1.
// It returns the position.
func (s *Sequencer) JoinFront(ctx context.Context, key, taskID string) (int, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	pos, err := joinFrontLua.Run(ctx, s.rdb, []string{s.lineKey(key), s.doneKey(key, taskID), s.mergedKey(key, taskID)}, taskID, s.nowMs()).Int()
	if err != nil {
		return 0, fmt.Errorf("ordering: join %s at the front of %q: %w", taskID, key, err)
	}
	return pos, nil
}
