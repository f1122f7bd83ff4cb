package main

import (
	"flag"
	"fmt"
	"math"
	"strings"
	"time"
)

// The capacity plan past one machine: how many workers, how much Redis memory, how many Redis
// commands a second and how many Redis shards a load needs, computed from the per-turn
// figures this benchmark measures (docs/performance.md). `go run ./integration/bench
// -capacity` prints it from today's figures (the defaults of the -per-* flags); a full run
// prints it again from the figures it just measured.

// PerTurn is what one turn costs, as the benchmark measures it.
type PerTurn struct {
	// WorkerRSSPerThinkingTurn: worker RSS per in-flight thinking turn, bytes ("worker peak
	// RSS … bytes per in-flight turn").
	WorkerRSSPerThinkingTurn float64
	// WorkerCPUPerNewTurn: the bench process's CPU per instant turn (worker and enqueuing
	// client).
	WorkerCPUPerNewTurn time.Duration
	// RedisBytesPerThinkingTurn: what a turn holds in Redis while it thinks.
	RedisBytesPerThinkingTurn float64
	// RedisAsynqBytesPerFinishedTurn and RedisLettaqBytesPerFinishedTurn: what a finished
	// turn leaves in Redis, in Asynq's keys (kept for the task retention) and in lettaq's
	// (kept for the journal retention).
	RedisAsynqBytesPerFinishedTurn, RedisLettaqBytesPerFinishedTurn float64
	// RedisCommandsPerNewTurn: the commands Redis runs per instant turn, those inside
	// scripts too (INFO commandstats).
	RedisCommandsPerNewTurn float64
	// RedisCPUPerNewTurn: Redis's main-thread CPU per instant turn (INFO cpu).
	RedisCPUPerNewTurn time.Duration
	// RedisCommandsPerMinPerThinkingTurn: commands per minute per thinking turn.
	RedisCommandsPerMinPerThinkingTurn float64
}

// Today's figures: `go run ./integration/bench -latency 100 -throughput 1000 -concurrent 3000
// -think 20s -thread-mode conversation` on the 2-CPU VM (docs/performance.md).
var measuredPerTurn = PerTurn{
	WorkerRSSPerThinkingTurn:           34071,
	WorkerCPUPerNewTurn:                662 * time.Microsecond,
	RedisBytesPerThinkingTurn:          7746,
	RedisAsynqBytesPerFinishedTurn:     1222,
	RedisLettaqBytesPerFinishedTurn:    7514,
	RedisCommandsPerNewTurn:            70.4,
	RedisCPUPerNewTurn:                 320 * time.Microsecond,
	RedisCommandsPerMinPerThinkingTurn: 0.2,
}

// Assumptions of the plan, beside the measured figures.
type Assumptions struct {
	WorkerMemory float64 // bytes a worker may use (the container's memory limit)
	WorkerCPUs   float64 // CPUs of a worker
	ShardMemory  float64 // memory of one Redis shard (a master), bytes
	// Target is the share of every resource the plan fills (workers' memory and CPU, a
	// shard's main thread and memory): the rest is for bursts and a lost node.
	Target float64
	// TaskRetention: how long Asynq keeps a finished task and its result (queue's
	// DefaultRetention). JournalRetention: how long lettaq keeps a turn's journal record,
	// reply events and markers (7 days in the worker).
	TaskRetention, JournalRetention time.Duration
}

var defaultAssumptions = Assumptions{
	WorkerMemory:     512 << 20, // docker-compose.yaml's mem_limit
	WorkerCPUs:       2,
	ShardMemory:      32 << 30,
	Target:           0.5,
	TaskRetention:    24 * time.Hour,
	JournalRetention: 7 * 24 * time.Hour,
}

// Load is what a deployment must carry: turns thinking at once, and new turns a second.
type Load struct {
	Thinking  int
	NewPerSec float64
}

// defaultLoads: a first deployment's 100 and 1,000 thinking turns (1 and 10 new a second),
// then 10k and 100k concurrent thinking turns, with 100 and 1,000 new turns a second.
var defaultLoads = []Load{{100, 1}, {1000, 10}, {10000, 100}, {10000, 1000}, {100000, 100}, {100000, 1000}}

// Plan is what a Load needs.
type Plan struct {
	Load
	WorkersByMemory, WorkersByCPU, Workers int
	// RedisInFlight: the thinking turns' bytes; RedisRetained: the finished turns' kept for
	// their retention at this rate.
	RedisInFlight, RedisRetained float64
	RedisCommandsPerSec          float64
	RedisCPU                     float64 // cores of Redis's main thread
	ShardsByCPU, ShardsByMemory  int
	Shards                       int
}

// RedisMemory is all the plan's Redis bytes.
func (p Plan) RedisMemory() float64 { return p.RedisInFlight + p.RedisRetained }

// PlanFor computes what l needs from the per-turn figures f under the assumptions a.
func PlanFor(f PerTurn, a Assumptions, l Load) Plan {
	p := Plan{Load: l}
	thinking := float64(l.Thinking)
	p.WorkersByMemory = ceilDiv(thinking*f.WorkerRSSPerThinkingTurn, a.WorkerMemory*a.Target)
	p.WorkersByCPU = ceilDiv(l.NewPerSec*f.WorkerCPUPerNewTurn.Seconds(), a.WorkerCPUs*a.Target)
	p.Workers = max(p.WorkersByMemory, p.WorkersByCPU, 1)

	p.RedisInFlight = thinking * f.RedisBytesPerThinkingTurn
	p.RedisRetained = l.NewPerSec * (f.RedisAsynqBytesPerFinishedTurn*a.TaskRetention.Seconds() +
		f.RedisLettaqBytesPerFinishedTurn*a.JournalRetention.Seconds())

	thinkingCmds := thinking * f.RedisCommandsPerMinPerThinkingTurn / 60
	p.RedisCommandsPerSec = l.NewPerSec*f.RedisCommandsPerNewTurn + thinkingCmds
	// A thinking turn's command is priced at an instant turn's mean CPU per command.
	perCmd := 0.0
	if f.RedisCommandsPerNewTurn > 0 {
		perCmd = f.RedisCPUPerNewTurn.Seconds() / f.RedisCommandsPerNewTurn
	}
	p.RedisCPU = l.NewPerSec*f.RedisCPUPerNewTurn.Seconds() + thinkingCmds*perCmd
	p.ShardsByCPU = ceilDiv(p.RedisCPU, a.Target)
	p.ShardsByMemory = ceilDiv(p.RedisMemory(), a.ShardMemory*a.Target)
	p.Shards = max(p.ShardsByCPU, p.ShardsByMemory, 1)
	return p
}

// FinishedTurnsPerWeek is how many finished turns a week one Redis shard (a.ShardMemory, filled
// to a.Target) keeps at a steady rate, each kept for its retention (Asynq's task for
// a.TaskRetention, lettaq's journal and reply keys for a.JournalRetention): past that rate a
// Redis with noeviction refuses every write, enqueues included.
func FinishedTurnsPerWeek(f PerTurn, a Assumptions) float64 {
	byteSeconds := f.RedisAsynqBytesPerFinishedTurn*a.TaskRetention.Seconds() + f.RedisLettaqBytesPerFinishedTurn*a.JournalRetention.Seconds()
	if byteSeconds <= 0 {
		return math.Inf(1)
	}
	return a.ShardMemory * a.Target / byteSeconds * (7 * 24 * time.Hour).Seconds()
}

// ceilDiv is ⌈a/b⌉ (0 when a is 0), with a relative tolerance so that a quotient a float
// rounding puts a hair above a whole number stays that number.
func ceilDiv(a, b float64) int {
	if a <= 0 || b <= 0 {
		return 0
	}
	q := a / b
	if r := math.Round(q); math.Abs(q-r) < 1e-9*math.Max(1, r) {
		return int(r)
	}
	return int(math.Ceil(q))
}

// CapacityTable renders the plans of loads as Markdown, with the figures and assumptions
// they come from.
func CapacityTable(f PerTurn, a Assumptions, loads []Load) string {
	var b strings.Builder
	fmt.Fprintf(&b, "capacity plan from: worker RSS %.0f B per thinking turn, worker CPU %.0f µs per new turn; Redis %.0f B per thinking turn, %.0f + %.0f B per finished turn (Asynq's, kept %v; lettaq's, kept %v), %.1f commands and %.0f µs of its main thread per new turn, %.1f commands per minute per thinking turn\n",
		f.WorkerRSSPerThinkingTurn, us(f.WorkerCPUPerNewTurn), f.RedisBytesPerThinkingTurn,
		f.RedisAsynqBytesPerFinishedTurn, f.RedisLettaqBytesPerFinishedTurn, days(a.TaskRetention), days(a.JournalRetention),
		f.RedisCommandsPerNewTurn, us(f.RedisCPUPerNewTurn), f.RedisCommandsPerMinPerThinkingTurn)
	fmt.Fprintf(&b, "assumptions: a worker has %s and %.0f CPUs, a Redis shard %s; every resource planned at %.0f%%\n\n",
		size(a.WorkerMemory), a.WorkerCPUs, size(a.ShardMemory), 100*a.Target)
	fmt.Fprintf(&b, "finished turns that fit: a Redis of %s, filled to %.0f%%, keeps %.0f finished turns a week (%.2f a second, steady)\n\n",
		size(a.ShardMemory), 100*a.Target, FinishedTurnsPerWeek(f, a), FinishedTurnsPerWeek(f, a)/(7*24*3600))
	b.WriteString("| thinking turns | new turns/s | workers (by memory / by CPU) | Redis memory: in flight + retained | Redis commands/s | Redis main thread | shards (by CPU / by memory) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, l := range loads {
		p := PlanFor(f, a, l)
		fmt.Fprintf(&b, "| %d | %.0f | %d (%d / %d) | %s: %s + %s | %.0f | %.2f cores | %d (%d / %d) |\n",
			l.Thinking, l.NewPerSec, p.Workers, p.WorkersByMemory, p.WorkersByCPU,
			size(p.RedisMemory()), size(p.RedisInFlight), size(p.RedisRetained),
			p.RedisCommandsPerSec, p.RedisCPU, p.Shards, p.ShardsByCPU, p.ShardsByMemory)
	}
	return b.String()
}

// PerTurn is the capacity plan's input from this run, when it measured all of it (a
// throughput and a concurrency run on a Redis that answers MEMORY USAGE).
func (r *Results) PerTurn() (PerTurn, bool) {
	per := int64(0)
	if r.PeakInFlight > 0 && r.PeakRSS > r.BaseRSS {
		per = int64(r.PeakRSS-r.BaseRSS) / r.PeakInFlight
	}
	f := PerTurn{
		WorkerRSSPerThinkingTurn:           float64(per),
		WorkerCPUPerNewTurn:                r.TurnCPU.Self,
		RedisBytesPerThinkingTurn:          float64(r.ThinkRedisBytes.Total()),
		RedisAsynqBytesPerFinishedTurn:     float64(r.TurnRedisBytes.Asynq),
		RedisLettaqBytesPerFinishedTurn:    float64(r.TurnRedisBytes.Lettaq),
		RedisCommandsPerNewTurn:            r.TurnRedisCalls,
		RedisCPUPerNewTurn:                 r.TurnRedisTime,
		RedisCommandsPerMinPerThinkingTurn: r.ThinkCmdsPerMin,
	}
	ok := f.WorkerRSSPerThinkingTurn > 0 && f.WorkerCPUPerNewTurn > 0 && f.RedisBytesPerThinkingTurn > 0 &&
		f.RedisLettaqBytesPerFinishedTurn > 0 && f.RedisCommandsPerNewTurn > 0 && f.RedisCPUPerNewTurn > 0
	return f, ok
}

// capacityFlags registers the plan's flags on fs: its per-turn figures and assumptions, with
// today's figures as defaults.
func capacityFlags(fs *flag.FlagSet) (*PerTurn, *Assumptions) {
	f, a := measuredPerTurn, defaultAssumptions
	fs.Float64Var(&f.WorkerRSSPerThinkingTurn, "per-rss-thinking", f.WorkerRSSPerThinkingTurn, "capacity plan: worker RSS bytes per in-flight thinking turn")
	fs.DurationVar(&f.WorkerCPUPerNewTurn, "per-cpu-new", f.WorkerCPUPerNewTurn, "capacity plan: worker CPU per new (instant) turn")
	fs.Float64Var(&f.RedisBytesPerThinkingTurn, "per-redis-bytes-thinking", f.RedisBytesPerThinkingTurn, "capacity plan: Redis bytes per in-flight thinking turn")
	fs.Float64Var(&f.RedisAsynqBytesPerFinishedTurn, "per-redis-bytes-asynq", f.RedisAsynqBytesPerFinishedTurn, "capacity plan: Redis bytes a finished turn leaves in Asynq's keys")
	fs.Float64Var(&f.RedisLettaqBytesPerFinishedTurn, "per-redis-bytes-lettaq", f.RedisLettaqBytesPerFinishedTurn, "capacity plan: Redis bytes a finished turn leaves in lettaq's keys")
	fs.Float64Var(&f.RedisCommandsPerNewTurn, "per-redis-cmds-new", f.RedisCommandsPerNewTurn, "capacity plan: commands Redis runs per new turn, inside scripts too")
	fs.DurationVar(&f.RedisCPUPerNewTurn, "per-redis-cpu-new", f.RedisCPUPerNewTurn, "capacity plan: Redis main-thread CPU per new turn")
	fs.Float64Var(&f.RedisCommandsPerMinPerThinkingTurn, "per-redis-cmds-thinking", f.RedisCommandsPerMinPerThinkingTurn, "capacity plan: Redis commands per minute per thinking turn")
	fs.Float64Var(&a.WorkerMemory, "plan-worker-memory", a.WorkerMemory, "capacity plan: bytes of memory per worker")
	fs.Float64Var(&a.WorkerCPUs, "plan-worker-cpus", a.WorkerCPUs, "capacity plan: CPUs per worker")
	fs.Float64Var(&a.ShardMemory, "plan-shard-memory", a.ShardMemory, "capacity plan: bytes of memory per Redis shard")
	fs.Float64Var(&a.Target, "plan-target", a.Target, "capacity plan: share of every resource to fill, in (0,1]")
	fs.DurationVar(&a.TaskRetention, "plan-task-retention", a.TaskRetention, "capacity plan: how long Asynq keeps a finished task")
	fs.DurationVar(&a.JournalRetention, "plan-journal-retention", a.JournalRetention, "capacity plan: how long lettaq keeps a finished turn's journal and events")
	return &f, &a
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// size is n bytes in KiB, MiB, GiB or TiB.
func size(n float64) string {
	for _, u := range []string{"B", "KiB", "MiB", "GiB"} {
		if n < 1024 {
			if u == "B" {
				return fmt.Sprintf("%.0f B", n)
			}
			return fmt.Sprintf("%.1f %s", n, u)
		}
		n /= 1024
	}
	return fmt.Sprintf("%.1f TiB", n)
}
