package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/redisopt"
)

// redisCounter counts what the clients it hooks send to Redis: round trips (a
// command alone, or a pipeline / MULTI…EXEC written at once) and commands (a
// script's EVALSHA is one command, whatever it runs inside Redis).
type redisCounter struct {
	trips, cmds atomic.Int64
	mu          sync.Mutex
	byName      map[string]int64 // when tracing: commands by name ("evalsha", "pipeline[xadd set]", …)
	trace       atomic.Bool
	// Asynq's dequeues (its processor takes one task per round trip, one
	// after the other): how many, and their total round-trip time.
	dequeues, dequeueNanos atomic.Int64
}

// dequeueRTT is the mean round trip of Asynq's dequeues since the last call,
// and resets it.
func (c *redisCounter) dequeueRTT() time.Duration {
	n, t := c.dequeues.Swap(0), c.dequeueNanos.Swap(0)
	if n == 0 {
		return 0
	}
	return time.Duration(t / n)
}

// isDequeue tells Asynq's dequeue script (its first key is a queue's pending list).
func isDequeue(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 4 || !strings.EqualFold(cmd.Name(), "evalsha") && !strings.EqualFold(cmd.Name(), "eval") {
		return false
	}
	k, _ := a[3].(string)
	return strings.HasPrefix(k, "asynq:{") && strings.HasSuffix(k, "}:pending")
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
		if c.trace.Load() {
			c.note(cmdName(cmd)) // (named only when tracing: the name allocates)
		}
		if isDequeue(cmd) {
			t0 := time.Now()
			err := next(ctx, cmd)
			c.dequeueNanos.Add(int64(time.Since(t0)))
			c.dequeues.Add(1)
			return err
		}
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
// clients lettaq makes from an asynq.RedisClientOpt (redisopt.Lean); without, Asynq's.
type countingOpt struct {
	asynq.RedisClientOpt
	c    *redisCounter
	lean bool
}

func (o countingOpt) MakeRedisClient() interface{} {
	var opt asynq.RedisConnOpt = o.RedisClientOpt
	if o.lean {
		opt = redisopt.Lean(opt)
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

// redisServerTime is the CPU time of Redis's main thread so far (INFO cpu:
// used_cpu_user_main_thread + used_cpu_sys_main_thread): commands, scripts
// and the network I/O of its one thread. Its difference over a run, divided
// by the tasks of the run, is the Redis time a task costs (anything else
// using this Redis at the time counts too: run the benchmark on a quiet one).
func redisServerTime(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var sec float64
	n := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || k != "used_cpu_user_main_thread" && k != "used_cpu_sys_main_thread" {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %q: %w", line, err)
		}
		sec += f
		n++
	}
	if n != 2 {
		return 0, fmt.Errorf("INFO cpu: no main thread times (Redis older than 6.2?)")
	}
	return time.Duration(sec * float64(time.Second)), nil
}

// redisCalls reads INFO commandstats: the calls of every command Redis ran,
// those run inside scripts included (an EVALSHA counts once as evalsha and
// once per command it runs).
func redisCalls(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(kv, "calls="); ok {
				c, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %w", line, err)
				}
				out[strings.TrimPrefix(k, "cmdstat_")] = c
			}
		}
	}
	return out, nil
}

// callsPer is what Redis ran between two redisCalls, per unit of n: the
// total (scripts' own calls not counted, the commands they ran counted) and
// the commands by name, most first.
func callsPer(a, b map[string]int64, n int) (total float64, top []nameCount) {
	if a == nil || b == nil || n <= 0 {
		return 0, nil
	}
	for k, v := range b {
		d := v - a[k]
		if d <= 0 || k == "info" {
			continue
		}
		top = append(top, nameCount{k, d})
		if k != "evalsha" && k != "eval" {
			total += float64(d)
		}
	}
	sort.Slice(top, func(i, j int) bool {
		if top[i].n != top[j].n {
			return top[i].n > top[j].n
		}
		return top[i].name < top[j].name
	})
	return total / float64(n), top
}

// topCalls renders the commands that Redis ran most, per unit of n.
func topCalls(top []nameCount, n int) string {
	var parts []string
	for i, nc := range top {
		if i == 8 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", nc.name, float64(nc.n)/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// redisLocalPID is the Redis server's process id (INFO server) when that
// process is on this machine (its /proc entry is redis-server), else 0.
func redisLocalPID(ctx context.Context, rdb *redis.Client) int {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k != "process_id" {
			continue
		}
		pid, err := strconv.Atoi(v)
		if err != nil {
			return 0
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !strings.HasPrefix(strings.TrimSpace(string(comm)), "redis") {
			return 0 // another machine's (or container's) process
		}
		return pid
	}
	return 0
}
