// Package capacity is the capacity plan past one machine: how many workers, how much Redis
// memory, how many Redis commands a second, how many Redis Cluster masters and which
// LETTAQ_SHARDS a load needs, computed from the per-turn figures the benchmark measures
// (docs/performance.md). `go run ./integration/bench -capacity` prints it; the retention
// memory test (integration/retentionmemory_test.go) checks its memory against a Redis.
package capacity

import (
	"math"
	"time"

	"github.com/lettaq/lettaq/queue/shard"
)

// PerTurn is the plan's measured input: what one turn costs, as the benchmark measures it,
// and the two figures measured beside it (Redis's memory overhead over the keys' bytes, and
// what an idle worker's polling costs per shard).
type PerTurn struct {
	// WorkerRSSPerThinkingTurn: worker RSS per in-flight thinking turn, bytes ("worker peak
	// RSS … bytes per in-flight turn").
	WorkerRSSPerThinkingTurn float64
	// WorkerCPUPerNewTurn: the bench process's CPU per instant turn (worker and enqueuing
	// client).
	WorkerCPUPerNewTurn time.Duration
	// RedisBytesPerThinkingTurn: what a turn holds in Redis while it thinks.
	RedisBytesPerThinkingTurn float64
	// What a finished turn leaves in Redis, by how long it stays: Asynq's task (kept for the
	// task retention), lettaq's keys that follow the journal's retention (journal record,
	// reply stream, and a new chat's thread key), and the replies' markers (seq, emitted,
	// answered, accepted: kept for the replies' TTL, 7 days, whatever the journal's).
	RedisAsynqBytesPerFinishedTurn, RedisLettaqBytesPerFinishedTurn, RedisMarkerBytesPerFinishedTurn float64
	// RedisCommandsPerNewTurn: the commands Redis runs per instant turn, those inside
	// scripts too (INFO commandstats).
	RedisCommandsPerNewTurn float64
	// RedisCPUPerNewTurn: Redis's main-thread CPU per instant turn (INFO cpu).
	RedisCPUPerNewTurn time.Duration
	// RedisCommandsPerMinPerThinkingTurn: commands per minute per thinking turn.
	RedisCommandsPerMinPerThinkingTurn float64
	// RedisIdleCommandsPerShard: the commands a second an idle worker sends per shard (per
	// queue it polls, every LETTAQ_TASK_CHECK_INTERVAL).
	RedisIdleCommandsPerShard float64
	// RedisMemoryOverhead: Redis's used_memory over the MEMORY USAGE of the keys it holds
	// (its keyspace and expiry tables, Asynq's janitor deleting a task late), levelled off
	// under a steady load with retention on.
	RedisMemoryOverhead float64
}

// Measured is today's figures, each from the command that printed it (docs/performance.md):
//
//   - the worker's and the turns': `go run ./integration/bench -latency 100 -throughput 1000
//     -concurrent 3000 -think 20s -thread-mode conversation` on the 2-CPU VM;
//     (the larger of two runs), with a finished turn's bytes by retention class ("Redis
//     memory a finished instant turn leaves");
//   - the idle polls: `go run ./integration/idlecost -workers 1 -queues 1,16,64,256 -for 5s`
//     (555.0 commands a second for 16 queues: 34.7 a queue; 256 queues measured 28.0 a queue);
//   - the overhead: `LETTAQ_BENCH_RETENTION_MEMORY=1 go test -count=1 -run
//     TestRetentionMemoryLevelsOff -v ./integration/` (used_memory levelled off at 4.63 MiB
//     above its baseline, 1.34× the 3.46 MiB of the plan's RetainedBytes).
var Measured = PerTurn{
	WorkerRSSPerThinkingTurn:           37877,
	WorkerCPUPerNewTurn:                472 * time.Microsecond,
	RedisBytesPerThinkingTurn:          8704,
	RedisAsynqBytesPerFinishedTurn:     1222,
	RedisLettaqBytesPerFinishedTurn:    7253,
	RedisMarkerBytesPerFinishedTurn:    624,
	RedisCommandsPerNewTurn:            91.9,
	RedisCPUPerNewTurn:                 271 * time.Microsecond,
	RedisCommandsPerMinPerThinkingTurn: 0.2,
	RedisIdleCommandsPerShard:          34.7,
	RedisMemoryOverhead:                1.34,
}

// Assumptions of the plan, beside the measured figures.
type Assumptions struct {
	WorkerMemory float64 // bytes a worker may use (the container's memory limit)
	WorkerCPUs   float64 // CPUs of a worker
	MasterMemory float64 // memory of one Redis master (a single Redis, or a Cluster's master), bytes
	// Target is the share of every resource the plan fills (workers' memory and CPU, a
	// master's main thread and memory): the rest is for bursts and a lost node.
	Target float64
	// TaskRetention: how long Asynq keeps a finished task and its result (queue's
	// DefaultRetention). JournalRetention: LETTAQ_JOURNAL_RETENTION, which the reply streams
	// follow. MarkerRetention: the replies' markers' TTL (7 days, not a setting).
	TaskRetention, JournalRetention, MarkerRetention time.Duration
	// MaxMasters: the largest Cluster the plan proposes; past it, it shortens the journal's
	// retention instead (Choose).
	MaxMasters int
}

// Defaults: a worker is the compose file's, a master has 32 GiB, every resource at half,
// the worker's retentions.
var Defaults = Assumptions{
	WorkerMemory:     512 << 20, // docker-compose.yaml's mem_limit
	WorkerCPUs:       2,
	MasterMemory:     32 << 30,
	Target:           0.5,
	TaskRetention:    24 * time.Hour,
	JournalRetention: 7 * 24 * time.Hour,
	MarkerRetention:  7 * 24 * time.Hour,
	MaxMasters:       shard.MaxShards / MinShardsPerMaster,
}

// MinShardsPerMaster is how many shards a master should own at least, so that the fullest
// master (which owns ⌈N/M⌉ of the N shards) carries at most 5/4 of the mean.
const MinShardsPerMaster = 4

// Load is what a deployment must carry: turns thinking at once, and new turns a second.
type Load struct {
	Thinking  int
	NewPerSec float64
}

// Loads: a first deployment's 100 and 1,000 thinking turns (1 and 10 new a second), then 10k
// and 100k concurrent thinking turns, with 100 and 1,000 new turns a second.
var Loads = []Load{{100, 1}, {1000, 10}, {10000, 100}, {10000, 1000}, {100000, 100}, {100000, 1000}}

// Plan is what a Load needs.
type Plan struct {
	Load
	JournalRetention                       time.Duration // the journal retention it is computed for
	WorkersByMemory, WorkersByCPU, Workers int
	// RedisInFlight: the thinking turns' bytes; RedisRetained: the finished turns' kept for
	// their retentions at this rate (MEMORY USAGE of the keys, before Redis's overhead).
	RedisInFlight, RedisRetained float64
	// RedisTurnCommandsPerSec: the turns' commands; RedisIdleCommandsPerSec: every worker's
	// polls of every shard, as if idle (an upper bound: a busy worker polls less).
	RedisTurnCommandsPerSec, RedisIdleCommandsPerSec float64
	RedisCPU                                         float64 // cores of Redis's main threads, all masters
	// MastersByMemory and MastersByCPU: the masters each resource needs spread evenly;
	// Masters: enough that the fullest master (⌈Shards/Masters⌉ of the shards) fits both, 0
	// when no Cluster of at most MaxShards masters does.
	MastersByMemory, MastersByCPU, Masters int
	Shards                                 int // LETTAQ_SHARDS
}

// RedisMemory is the Redis memory the plan needs: the keys' bytes times Redis's overhead.
func (p Plan) RedisMemory(f PerTurn) float64 {
	return (p.RedisInFlight + p.RedisRetained) * max(f.RedisMemoryOverhead, 1)
}

// RedisCommandsPerSec is every command the plan's Redis runs a second.
func (p Plan) RedisCommandsPerSec() float64 {
	return p.RedisTurnCommandsPerSec + p.RedisIdleCommandsPerSec
}

// Deployable: a Cluster of at most a.MaxMasters masters carries it.
func (p Plan) Deployable(a Assumptions) bool { return p.Masters >= 1 && p.Masters <= a.MaxMasters }

// ShardsFor is the LETTAQ_SHARDS for m masters: 1 on a single Redis (shards there only cost
// polls), else the smallest of 16, 32, … 256 that gives every master MinShardsPerMaster
// shards, and 256 (shard.MaxShards) past 64 masters. Powers of two split evenly over 2, 4, 8 …
// masters; every shard costs each idle worker its polls, so no more than that.
func ShardsFor(m int) int {
	if m <= 1 {
		return 1
	}
	n := 16
	for n < MinShardsPerMaster*m && n < shard.MaxShards {
		n *= 2
	}
	return n
}

// fullest is the share of a deployment's keys and commands on its fullest master: m masters
// owning equal slot ranges own ⌊n/m⌋ or ⌈n/m⌉ of n evenly spaced shards.
func fullest(n, m int) float64 {
	if m <= 1 {
		return 1
	}
	return math.Ceil(float64(n)/float64(m)) / float64(n)
}

// RetainedBytes is what finished turns keep in Redis at newPerSec (MEMORY USAGE, before
// Redis's overhead): each class of bytes for its retention.
func RetainedBytes(f PerTurn, a Assumptions, newPerSec float64) float64 {
	return newPerSec * (f.RedisAsynqBytesPerFinishedTurn*a.TaskRetention.Seconds() +
		f.RedisLettaqBytesPerFinishedTurn*a.JournalRetention.Seconds() +
		f.RedisMarkerBytesPerFinishedTurn*a.MarkerRetention.Seconds())
}

// PlanFor computes what l needs from the per-turn figures f under the assumptions a.
func PlanFor(f PerTurn, a Assumptions, l Load) Plan {
	p := Plan{Load: l, JournalRetention: a.JournalRetention}
	thinking := float64(l.Thinking)
	p.WorkersByMemory = ceilDiv(thinking*f.WorkerRSSPerThinkingTurn, a.WorkerMemory*a.Target)
	p.WorkersByCPU = ceilDiv(l.NewPerSec*f.WorkerCPUPerNewTurn.Seconds(), a.WorkerCPUs*a.Target)
	p.Workers = max(p.WorkersByMemory, p.WorkersByCPU, 1)

	p.RedisInFlight = thinking * f.RedisBytesPerThinkingTurn
	p.RedisRetained = RetainedBytes(f, a, l.NewPerSec)
	memory := p.RedisMemory(f)

	thinkingCmds := thinking * f.RedisCommandsPerMinPerThinkingTurn / 60
	p.RedisTurnCommandsPerSec = l.NewPerSec*f.RedisCommandsPerNewTurn + thinkingCmds
	// A thinking turn's command, and an idle poll, is priced at an instant turn's mean CPU
	// per command.
	perCmd := 0.0
	if f.RedisCommandsPerNewTurn > 0 {
		perCmd = f.RedisCPUPerNewTurn.Seconds() / f.RedisCommandsPerNewTurn
	}
	turnCPU := l.NewPerSec*f.RedisCPUPerNewTurn.Seconds() + thinkingCmds*perCmd
	idle := func(shards int) float64 { return float64(p.Workers*shards) * f.RedisIdleCommandsPerShard }

	p.MastersByMemory = max(ceilDiv(memory, a.MasterMemory*a.Target), 1)
	// The idle polls grow with the shards, the shards with the masters: the masters by CPU
	// are those that carry the turns and the polls of their own shard count.
	for m := 1; m <= shard.MaxShards; m++ {
		cpu := turnCPU + idle(ShardsFor(m))*perCmd
		if ceilDiv(cpu, a.Target) <= m {
			p.MastersByCPU = m
			break
		}
	}
	if p.MastersByCPU == 0 { // more than any Cluster of MaxShards masters
		p.MastersByCPU = ceilDiv(turnCPU+idle(shard.MaxShards)*perCmd, a.Target)
	}
	for m := max(p.MastersByMemory, p.MastersByCPU); m >= 1 && m <= shard.MaxShards; m++ {
		n := ShardsFor(m)
		cpu := turnCPU + idle(n)*perCmd
		share := fullest(n, m)
		if memory*share <= a.MasterMemory*a.Target*(1+1e-9) && cpu*share <= a.Target*(1+1e-9) {
			p.Masters, p.Shards = m, n
			break
		}
	}
	shards := p.Shards
	if shards == 0 {
		shards = shard.MaxShards
	}
	p.RedisIdleCommandsPerSec = idle(shards)
	p.RedisCPU = turnCPU + p.RedisIdleCommandsPerSec*perCmd
	return p
}

// ShorterRetentions are the journal retentions Choose tries, longest first.
var ShorterRetentions = []time.Duration{3 * 24 * time.Hour, 24 * time.Hour, 12 * time.Hour, 6 * time.Hour, time.Hour}

// Choose is the plan for l with a's journal retention if a Cluster of at most a.MaxMasters
// carries it, else with the longest of ShorterRetentions that one does (the shortest when
// none does): the finished turns' retention is what a fast load's Redis memory grows with.
func Choose(f PerTurn, a Assumptions, l Load) Plan {
	p := PlanFor(f, a, l)
	for _, r := range ShorterRetentions {
		if p.Deployable(a) {
			break
		}
		if r >= a.JournalRetention {
			continue
		}
		b := a
		b.JournalRetention = r
		p = PlanFor(f, b, l)
	}
	return p
}

// FinishedTurnsPerWeek is how many finished turns a week one Redis master (a.MasterMemory,
// filled to a.Target) keeps at a steady rate, each kept for its retentions, with Redis's
// overhead: past that rate a Redis with noeviction refuses every write, enqueues included.
func FinishedTurnsPerWeek(f PerTurn, a Assumptions) float64 {
	perTurnPerSec := RetainedBytes(f, a, 1) * max(f.RedisMemoryOverhead, 1)
	if perTurnPerSec <= 0 {
		return math.Inf(1)
	}
	return a.MasterMemory * a.Target / perTurnPerSec * (7 * 24 * time.Hour).Seconds()
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
