package capacity

import (
	"fmt"
	"strings"
	"time"
)

// Table renders the plans of loads as Markdown, with the figures and assumptions they come
// from: a row per load with a's journal retention and, when no Cluster of at most
// a.MaxMasters masters carries it, a row with the retention Choose takes instead, and under
// the table what to deploy for each load.
func Table(f PerTurn, a Assumptions, loads []Load) string {
	var b strings.Builder
	fmt.Fprintf(&b, "capacity plan from: worker RSS %.0f B per thinking turn, worker CPU %.0f µs per new turn; Redis %.0f B per thinking turn, %.0f + %.0f + %.0f B per finished turn (Asynq's, kept %v; lettaq's, kept the journal retention; the replies' markers, kept %v) × %.2f Redis overhead, %.1f commands and %.0f µs of its main thread per new turn, %.1f commands per minute per thinking turn, %.1f commands/s per shard per idle worker\n",
		f.WorkerRSSPerThinkingTurn, us(f.WorkerCPUPerNewTurn), f.RedisBytesPerThinkingTurn,
		f.RedisAsynqBytesPerFinishedTurn, f.RedisLettaqBytesPerFinishedTurn, f.RedisMarkerBytesPerFinishedTurn,
		days(a.TaskRetention), days(a.MarkerRetention), max(f.RedisMemoryOverhead, 1),
		f.RedisCommandsPerNewTurn, us(f.RedisCPUPerNewTurn), f.RedisCommandsPerMinPerThinkingTurn, f.RedisIdleCommandsPerShard)
	fmt.Fprintf(&b, "assumptions: a worker has %s and %.0f CPUs, a Redis master %s; every resource planned at %.0f%%; at most %d masters\n\n",
		size(a.WorkerMemory), a.WorkerCPUs, size(a.MasterMemory), 100*a.Target, a.MaxMasters)
	fmt.Fprintf(&b, "finished turns that fit: a Redis of %s, filled to %.0f%%, keeps %.0f finished turns a week (%.2f a second, steady) with the journal kept %v\n\n",
		size(a.MasterMemory), 100*a.Target, FinishedTurnsPerWeek(f, a), FinishedTurnsPerWeek(f, a)/(7*24*3600), days(a.JournalRetention))
	b.WriteString("| thinking turns | new turns/s | journal retention | workers (by memory / by CPU) | Redis memory: (in flight + retained) × overhead | Redis commands/s: turns + idle polls | Redis main threads | Redis masters (by memory / by CPU) | LETTAQ_SHARDS |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	var advice []string
	for _, l := range loads {
		p := PlanFor(f, a, l)
		row(&b, f, a, p, "")
		c := p
		if !p.Deployable(a) {
			c = Choose(f, a, l)
			row(&b, f, a, c, "↳ ")
		}
		advice = append(advice, Advice(f, a, p, c))
	}
	b.WriteString("\n" + strings.Join(advice, "\n") + "\n")
	return b.String()
}

func row(b *strings.Builder, f PerTurn, a Assumptions, p Plan, mark string) {
	masters := "none"
	if p.Masters > 0 {
		masters = fmt.Sprint(p.Masters)
	}
	shards := "—"
	if p.Shards > 0 {
		shards = fmt.Sprint(p.Shards)
	}
	fmt.Fprintf(b, "| %s%d | %.0f | %v | %d (%d / %d) | %s: (%s + %s) × %.2f | %.0f: %.0f + %.0f | %.2f cores | %s (%d / %d) | %s |\n",
		mark, p.Thinking, p.NewPerSec, days(p.JournalRetention), p.Workers, p.WorkersByMemory, p.WorkersByCPU,
		size(p.RedisMemory(f)), size(p.RedisInFlight), size(p.RedisRetained), max(f.RedisMemoryOverhead, 1),
		p.RedisCommandsPerSec(), p.RedisTurnCommandsPerSec, p.RedisIdleCommandsPerSec, p.RedisCPU,
		masters, p.MastersByMemory, p.MastersByCPU, shards)
}

// Advice is what to deploy for a load: p is its plan with a's journal retention, c the one
// Choose took (p itself when p is deployable).
func Advice(f PerTurn, a Assumptions, p, c Plan) string {
	load := fmt.Sprintf("%d thinking turns, %.0f new a second:", p.Thinking, p.NewPerSec)
	deploy := func(p Plan) string {
		redis := fmt.Sprintf("a Redis of %s", size(a.MasterMemory))
		if p.Masters > 1 {
			redis = fmt.Sprintf("a Redis Cluster of %d masters of %s, LETTAQ_SHARDS=%d", p.Masters, size(a.MasterMemory), p.Shards)
		}
		workers := "1 worker"
		if p.Workers > 1 {
			workers = fmt.Sprintf("%d workers", p.Workers)
		}
		return fmt.Sprintf("%s, %s, LETTAQ_JOURNAL_RETENTION=%v", workers, redis, hours(p.JournalRetention))
	}
	switch {
	case p.Deployable(a):
		return fmt.Sprintf("- %s %s.", load, deploy(p))
	case c.Deployable(a):
		return fmt.Sprintf("- %s with the journal kept %v it needs %s; %s.", load, days(p.JournalRetention), needs(p), deploy(c))
	default:
		return fmt.Sprintf("- %s no Cluster of at most %d masters carries it, even with the journal kept %v (%s): give the masters more memory (-plan-shard-memory) or measure lighter turns.",
			load, a.MaxMasters, days(c.JournalRetention), needs(c))
	}
}

func needs(p Plan) string {
	if p.Masters == 0 {
		return fmt.Sprintf("more masters than LETTAQ_SHARDS can spread over (%d by memory, %d by CPU)", p.MastersByMemory, p.MastersByCPU)
	}
	return fmt.Sprintf("%d masters", p.Masters)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// days is d in days when it is whole days, else in hours when whole hours, else as
// time.Duration prints it.
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return hours(d)
}

// hours is d as LETTAQ_JOURNAL_RETENTION takes it (a Go duration: "168h", "24h").
func hours(d time.Duration) string {
	if d > 0 && d%time.Hour == 0 {
		return fmt.Sprintf("%dh", d/time.Hour)
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
