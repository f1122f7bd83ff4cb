package main

import (
	"flag"

	"github.com/lettaq/lettaq/integration/bench/capacity"
)

// The capacity plan past one machine (package capacity): `go run ./integration/bench
// -capacity` prints it from today's figures (the defaults of the -per-* flags); a full run
// prints it again from the figures it just measured.

// PerTurn is the capacity plan's input from this run, when it measured all of it (a
// throughput and a concurrency run on a Redis that answers MEMORY USAGE); the figures a run
// does not measure (Redis's memory overhead, an idle worker's polls) are base's.
func (r *Results) PerTurn(base capacity.PerTurn) (capacity.PerTurn, bool) {
	per := int64(0)
	if r.PeakInFlight > 0 && r.PeakRSS > r.BaseRSS {
		per = int64(r.PeakRSS-r.BaseRSS) / r.PeakInFlight
	}
	f := base
	f.WorkerRSSPerThinkingTurn = float64(per)
	f.WorkerCPUPerNewTurn = r.TurnCPU.Self
	f.RedisBytesPerThinkingTurn = float64(r.ThinkRedisBytes.Total())
	f.RedisAsynqBytesPerFinishedTurn = float64(r.TurnRedisBytes.Asynq)
	f.RedisLettaqBytesPerFinishedTurn = float64(r.TurnRedisBytes.Lettaq - r.TurnRedisBytes.Markers)
	f.RedisMarkerBytesPerFinishedTurn = float64(r.TurnRedisBytes.Markers)
	f.RedisCommandsPerNewTurn = r.TurnRedisCalls
	f.RedisCPUPerNewTurn = r.TurnRedisTime
	f.RedisCommandsPerMinPerThinkingTurn = r.ThinkCmdsPerMin
	ok := f.WorkerRSSPerThinkingTurn > 0 && f.WorkerCPUPerNewTurn > 0 && f.RedisBytesPerThinkingTurn > 0 &&
		f.RedisLettaqBytesPerFinishedTurn > 0 && f.RedisCommandsPerNewTurn > 0 && f.RedisCPUPerNewTurn > 0
	return f, ok
}

// capacityFlags registers the plan's flags on fs: its measured figures and assumptions, with
// today's figures as defaults.
func capacityFlags(fs *flag.FlagSet) (*capacity.PerTurn, *capacity.Assumptions) {
	f, a := capacity.Measured, capacity.Defaults
	fs.Float64Var(&f.WorkerRSSPerThinkingTurn, "per-rss-thinking", f.WorkerRSSPerThinkingTurn, "capacity plan: worker RSS bytes per in-flight thinking turn")
	fs.DurationVar(&f.WorkerCPUPerNewTurn, "per-cpu-new", f.WorkerCPUPerNewTurn, "capacity plan: worker CPU per new (instant) turn")
	fs.Float64Var(&f.RedisBytesPerThinkingTurn, "per-redis-bytes-thinking", f.RedisBytesPerThinkingTurn, "capacity plan: Redis bytes per in-flight thinking turn")
	fs.Float64Var(&f.RedisAsynqBytesPerFinishedTurn, "per-redis-bytes-asynq", f.RedisAsynqBytesPerFinishedTurn, "capacity plan: Redis bytes a finished turn leaves in Asynq's keys")
	fs.Float64Var(&f.RedisLettaqBytesPerFinishedTurn, "per-redis-bytes-lettaq", f.RedisLettaqBytesPerFinishedTurn, "capacity plan: Redis bytes a finished turn leaves in lettaq's keys kept for the journal retention (journal, reply stream, thread key)")
	fs.Float64Var(&f.RedisMarkerBytesPerFinishedTurn, "per-redis-bytes-markers", f.RedisMarkerBytesPerFinishedTurn, "capacity plan: Redis bytes of a finished turn's reply markers (seq, emitted, answered, accepted), kept 7 days")
	fs.Float64Var(&f.RedisCommandsPerNewTurn, "per-redis-cmds-new", f.RedisCommandsPerNewTurn, "capacity plan: commands Redis runs per new turn, inside scripts too")
	fs.DurationVar(&f.RedisCPUPerNewTurn, "per-redis-cpu-new", f.RedisCPUPerNewTurn, "capacity plan: Redis main-thread CPU per new turn")
	fs.Float64Var(&f.RedisCommandsPerMinPerThinkingTurn, "per-redis-cmds-thinking", f.RedisCommandsPerMinPerThinkingTurn, "capacity plan: Redis commands per minute per thinking turn")
	fs.Float64Var(&f.RedisIdleCommandsPerShard, "per-redis-cmds-idle-shard", f.RedisIdleCommandsPerShard, "capacity plan: Redis commands a second an idle worker sends per shard (go run ./integration/idlecost)")
	fs.Float64Var(&f.RedisMemoryOverhead, "per-redis-overhead", f.RedisMemoryOverhead, "capacity plan: Redis used_memory over the keys' MEMORY USAGE (TestRetentionMemoryLevelsOff)")
	fs.Float64Var(&a.WorkerMemory, "plan-worker-memory", a.WorkerMemory, "capacity plan: bytes of memory per worker")
	fs.Float64Var(&a.WorkerCPUs, "plan-worker-cpus", a.WorkerCPUs, "capacity plan: CPUs per worker")
	fs.Float64Var(&a.MasterMemory, "plan-shard-memory", a.MasterMemory, "capacity plan: bytes of memory per Redis master (a single Redis, or a Cluster's master)")
	fs.Float64Var(&a.Target, "plan-target", a.Target, "capacity plan: share of every resource to fill, in (0,1]")
	fs.DurationVar(&a.TaskRetention, "plan-task-retention", a.TaskRetention, "capacity plan: how long Asynq keeps a finished task")
	fs.DurationVar(&a.JournalRetention, "plan-journal-retention", a.JournalRetention, "capacity plan: LETTAQ_JOURNAL_RETENTION, how long lettaq keeps a finished turn's journal and reply stream")
	fs.IntVar(&a.MaxMasters, "plan-max-masters", a.MaxMasters, "capacity plan: the largest Redis Cluster to propose; past it the plan shortens the journal retention")
	return &f, &a
}
