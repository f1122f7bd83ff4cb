package main

import (
	"context"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
)

// redisCounter counts what the clients it hooks send to Redis: round trips (a
// command alone, or a pipeline / MULTI…EXEC written at once) and commands (a
// script's EVALSHA is one command, whatever it runs inside Redis).
type redisCounter struct {
	trips, cmds atomic.Int64
	mu          sync.Mutex
	byName      map[string]int64 // when tracing: commands by name ("evalsha", "pipeline[xadd set]", …)
	trace       atomic.Bool
}

func (c *redisCounter) snapshot() (trips, cmds int64) { return c.trips.Load(), c.cmds.Load() }

func (c *redisCounter) note(name string) {
	if !c.trace.Load() {
		return
	}
	c.mu.Lock()
	if c.byName == nil {
		c.byName = map[string]int64{}
	}
	c.byName[name]++
	c.mu.Unlock()
}

// names returns the traced round trips by kind, most frequent first, and resets them.
func (c *redisCounter) names() []nameCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []nameCount
	for n, k := range c.byName {
		out = append(out, nameCount{n, k})
	}
	c.byName = nil
	sort.Slice(out, func(i, j int) bool {
		if out[i].n != out[j].n {
			return out[i].n > out[j].n
		}
		return out[i].name < out[j].name
	})
	return out
}

type nameCount struct {
	name string
	n    int64
}

func cmdName(cmd redis.Cmder) string {
	n := strings.ToLower(cmd.Name())
	if n == "evalsha" || n == "eval" {
		// name the script by its first key's last segment, which says what it is for
		if a := cmd.Args(); len(a) > 3 {
			if k, ok := a[3].(string); ok {
				n += "(" + keyShape(k) + ")"
			}
		}
	}
	return n
}

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		c.note(cmdName(cmd))
		return next(ctx, cmd)
	}
}
func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		n := 0
		var names []string
		for _, cmd := range cmds {
			if m := strings.ToLower(cmd.Name()); m != "multi" && m != "exec" {
				n++
				if c.trace.Load() {
					names = append(names, cmdName(cmd))
				}
			}
		}
		c.cmds.Add(int64(n))
		if c.trace.Load() {
			c.note("pipeline[" + strings.Join(names, " ") + "]")
		}
		return next(ctx, cmds)
	}
}

// countingOpt is an asynq.RedisConnOpt whose clients (Asynq's and lettaq's: both make
// theirs from the option they are given) report to a redisCounter. With lean they are the
// clients lettaq makes from an asynq.RedisClientOpt (queue.LeanRedis); without, Asynq's.
type countingOpt struct {
	asynq.RedisClientOpt
	c    *redisCounter
	lean bool
}

func (o countingOpt) MakeRedisClient() interface{} {
	var opt asynq.RedisConnOpt = o.RedisClientOpt
	if o.lean {
		opt = queue.LeanRedis(opt)
	}
	rdb := opt.MakeRedisClient().(*redis.Client)
	rdb.AddHook(o.c)
	return rdb
}

// keyShape is a key with its ids starred, the last three segments: "asynq:{q}:t:<id>" is
// "{*}:t:*".
func keyShape(k string) string {
	seg := strings.Split(k, ":")
	for i, p := range seg {
		if strings.ContainsAny(p, "0123456789") || len(p) > 20 {
			seg[i] = "*"
		}
	}
	if len(seg) > 3 {
		seg = seg[len(seg)-3:]
	}
	return strings.Join(seg, ":")
}
