package main

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Round figures, so that every result can be worked out by hand.
var (
	roundPerTurn = PerTurn{
		WorkerRSSPerThinkingTurn:           1000,
		WorkerCPUPerNewTurn:                time.Millisecond,
		RedisBytesPerThinkingTurn:          100,
		RedisAsynqBytesPerFinishedTurn:     10,
		RedisLettaqBytesPerFinishedTurn:    20,
		RedisCommandsPerNewTurn:            50,
		RedisCPUPerNewTurn:                 100 * time.Microsecond,
		RedisCommandsPerMinPerThinkingTurn: 6,
	}
	roundAssumptions = Assumptions{WorkerMemory: 1e6, WorkerCPUs: 1, ShardMemory: 1e9, Target: 0.5,
		TaskRetention: 100 * time.Second, JournalRetention: 1000 * time.Second}
)

func TestCapacityPlanByHand(t *testing.T) {
	p := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 1000, NewPerSec: 10})
	want := Plan{Load: Load{1000, 10},
		WorkersByMemory:     2, // 1000 turns × 1000 B / (1e6 B × 0.5)
		WorkersByCPU:        1, // 10/s × 1 ms = 0.01 CPU, over 1 CPU × 0.5: rounded up
		Workers:             2,
		RedisInFlight:       100000, // 1000 × 100 B
		RedisRetained:       210000, // 10/s × (10 B × 100 s + 20 B × 1000 s)
		RedisCommandsPerSec: 600,    // 10/s × 50 + 1000 × 6/min
		RedisCPU:            0.0012, // 10/s × 100 µs + 100 commands/s × 2 µs
		ShardsByCPU:         1, ShardsByMemory: 1, Shards: 1,
	}
	if !closePlan(p, want) {
		t.Errorf("plan\n%+v\nwant\n%+v", p, want)
	}
}

// The finished turns a week that fit in a shard: its memory at the target over what a turn
// keeps for how long.
func TestFinishedTurnsPerWeekByHand(t *testing.T) {
	// 1e9 B × 0.5 / (10 B × 100 s + 20 B × 1000 s) = 23809.52…/s, × 604800 s a week.
	if got, want := FinishedTurnsPerWeek(roundPerTurn, roundAssumptions), 1e9*0.5/21000*604800; math.Abs(got-want) > 1e-6*want {
		t.Errorf("FinishedTurnsPerWeek = %v, want %v", got, want)
	}
	if table := CapacityTable(roundPerTurn, roundAssumptions, nil); !strings.Contains(table, "keeps 14400000000 finished turns a week") {
		t.Errorf("the table does not say how many finished turns a week fit:\n%s", table)
	}
}

func TestCapacityPlanScales(t *testing.T) {
	base := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 10000, NewPerSec: 1000})
	// Twice the thinking turns: twice the workers their memory needs, twice their Redis bytes.
	twice := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 20000, NewPerSec: 1000})
	if twice.WorkersByMemory != 2*base.WorkersByMemory || twice.RedisInFlight != 2*base.RedisInFlight {
		t.Errorf("doubling the thinking turns: workers by memory %d → %d, Redis in flight %.0f → %.0f",
			base.WorkersByMemory, twice.WorkersByMemory, base.RedisInFlight, twice.RedisInFlight)
	}
	// Twice the new turns a second: twice the workers their CPU needs, twice the retained
	// bytes and twice the instant turns' commands.
	faster := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 10000, NewPerSec: 2000})
	thinkCmds := 10000 * roundPerTurn.RedisCommandsPerMinPerThinkingTurn / 60
	if faster.WorkersByCPU != 2*base.WorkersByCPU || faster.RedisRetained != 2*base.RedisRetained ||
		faster.RedisCommandsPerSec-thinkCmds != 2*(base.RedisCommandsPerSec-thinkCmds) {
		t.Errorf("doubling the new turns a second: workers by CPU %d → %d, retained %.0f → %.0f, commands/s %.0f → %.0f",
			base.WorkersByCPU, faster.WorkersByCPU, base.RedisRetained, faster.RedisRetained, base.RedisCommandsPerSec, faster.RedisCommandsPerSec)
	}
	// Half the target: twice the workers and shards. (Shards of 2.2 MB, so that this load's
	// 22 MB fill 20 of them at half their memory.)
	a := roundAssumptions
	a.ShardMemory = 2.2e6
	base = PlanFor(roundPerTurn, a, Load{Thinking: 10000, NewPerSec: 1000})
	a.Target /= 2
	half := PlanFor(roundPerTurn, a, Load{Thinking: 10000, NewPerSec: 1000})
	if base.ShardsByMemory != 20 {
		t.Errorf("22 MB in shards of 2.2 MB filled half: %d shards, want 20", base.ShardsByMemory)
	}
	if half.WorkersByMemory != 2*base.WorkersByMemory || half.ShardsByMemory != 2*base.ShardsByMemory {
		t.Errorf("half the target: workers by memory %d → %d, shards by memory %d → %d",
			base.WorkersByMemory, half.WorkersByMemory, base.ShardsByMemory, half.ShardsByMemory)
	}
	// One turn past what fits takes one worker more, never a fraction.
	fits := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 500})
	over := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 501})
	if fits.Workers != 1 || over.Workers != 2 {
		t.Errorf("500 turns of 1000 B in 1e6 × 0.5 B: %d workers, 501: %d; want 1 and 2", fits.Workers, over.Workers)
	}
	// Retention is what the retained bytes scale with: a day's journal instead of a week's.
	short := roundAssumptions
	short.JournalRetention /= 10
	p := PlanFor(roundPerTurn, short, Load{NewPerSec: 10})
	if p.RedisRetained != 10*(10*100+20*100) {
		t.Errorf("retained with a tenth of the journal retention: %.0f, want 30000", p.RedisRetained)
	}
}

// The printed plan has a row per load, computed from the figures it names.
func TestCapacityTable(t *testing.T) {
	table := CapacityTable(measuredPerTurn, defaultAssumptions, defaultLoads)
	t.Log("\n" + table)
	for _, l := range defaultLoads {
		p := PlanFor(measuredPerTurn, defaultAssumptions, l)
		row := "| " + itoa(l.Thinking) + " | " + itoa(int(l.NewPerSec)) + " | " + itoa(p.Workers) + " ("
		if !strings.Contains(table, row) {
			t.Errorf("no row starting %q in\n%s", row, table)
		}
	}
	for _, want := range []string{"34071 B per thinking turn", "planned at 50%", "kept 7d"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table does not say %q", want)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func closePlan(a, b Plan) bool {
	near := func(x, y float64) bool { return x == y || (x-y)*(x-y) < 1e-18+1e-12*y*y }
	return a.Load == b.Load && a.WorkersByMemory == b.WorkersByMemory && a.WorkersByCPU == b.WorkersByCPU &&
		a.Workers == b.Workers && near(a.RedisInFlight, b.RedisInFlight) && near(a.RedisRetained, b.RedisRetained) &&
		near(a.RedisCommandsPerSec, b.RedisCommandsPerSec) && near(a.RedisCPU, b.RedisCPU) &&
		a.ShardsByCPU == b.ShardsByCPU && a.ShardsByMemory == b.ShardsByMemory && a.Shards == b.Shards
}
