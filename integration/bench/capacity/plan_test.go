package capacity

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/shard"
)

// Round figures, so that every result can be worked out by hand.
var (
	roundPerTurn = PerTurn{
		WorkerRSSPerThinkingTurn:           1000,
		WorkerCPUPerNewTurn:                time.Millisecond,
		RedisBytesPerThinkingTurn:          100,
		RedisAsynqBytesPerFinishedTurn:     10,
		RedisLettaqBytesPerFinishedTurn:    20,
		RedisMarkerBytesPerFinishedTurn:    5,
		RedisCommandsPerNewTurn:            50,
		RedisCPUPerNewTurn:                 100 * time.Microsecond,
		RedisCommandsPerMinPerThinkingTurn: 6,
		RedisIdleCommandsPerShard:          10,
		RedisMemoryOverhead:                1,
	}
	roundAssumptions = Assumptions{WorkerMemory: 1e6, WorkerCPUs: 1, MasterMemory: 1e9, Target: 0.5,
		TaskRetention: 100 * time.Second, JournalRetention: 1000 * time.Second, MarkerRetention: 2000 * time.Second,
		MaxMasters: 64}
)

func TestCapacityPlanByHand(t *testing.T) {
	p := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 1000, NewPerSec: 10})
	want := Plan{Load: Load{1000, 10}, JournalRetention: 1000 * time.Second,
		WorkersByMemory:         2, // 1000 turns × 1000 B / (1e6 B × 0.5)
		WorkersByCPU:            1, // 10/s × 1 ms = 0.01 CPU, over 1 CPU × 0.5: rounded up
		Workers:                 2,
		RedisInFlight:           100000,  // 1000 × 100 B
		RedisRetained:           310000,  // 10/s × (10 B × 100 s + 20 B × 1000 s + 5 B × 2000 s)
		RedisTurnCommandsPerSec: 600,     // 10/s × 50 + 1000 × 6/min
		RedisIdleCommandsPerSec: 20,      // 2 workers × 1 shard × 10/s
		RedisCPU:                0.00124, // 10/s × 100 µs + (100 + 20) commands/s × 2 µs
		MastersByMemory:         1, MastersByCPU: 1, Masters: 1,
		Shards: 1, // a single Redis
	}
	if !closePlan(p, want) {
		t.Errorf("plan\n%+v\nwant\n%+v", p, want)
	}
}

// A load past one master: the masters its memory needs, then as many more as make the
// fullest master (⌈shards/masters⌉ of the shards) fit, and the shards for them.
func TestClusterPlanByHand(t *testing.T) {
	f, a := roundPerTurn, roundAssumptions
	f.RedisMemoryOverhead = 1.5
	a.MasterMemory = 2e6 // 1e6 B at half
	p := PlanFor(f, a, Load{NewPerSec: 1000})
	want := Plan{Load: Load{0, 1000}, JournalRetention: 1000 * time.Second,
		WorkersByMemory: 0, WorkersByCPU: 2, Workers: 2, // 1000/s × 1 ms = 1 CPU, over 1 CPU × 0.5
		RedisRetained:           31e6,    // 1000/s × 31,000 B·s; × 1.5 overhead: 46.5e6 B
		RedisTurnCommandsPerSec: 50000,   // 1000/s × 50
		RedisIdleCommandsPerSec: 5120,    // 2 workers × 256 shards × 10/s
		RedisCPU:                0.11024, // 1000/s × 100 µs + 5120/s × 2 µs
		// 46.5e6 B over 1e6 B a master: 47 even masters; but 256 shards (4 × 47 > 128)
		// over 47 to 51 masters put 6 shards on the fullest, 6/256 × 46.5e6 = 1.09e6 B,
		// too much; over 52, 5: 0.91e6 B.
		MastersByMemory: 47, MastersByCPU: 1, Masters: 52, Shards: 256,
	}
	if !closePlan(p, want) {
		t.Errorf("plan\n%+v\nwant\n%+v", p, want)
	}
	if got := p.RedisMemory(f); math.Abs(got-46.5e6) > 1 {
		t.Errorf("Redis memory %.0f, want 46.5e6 (31e6 B × 1.5)", got)
	}
	if !p.Deployable(a) {
		t.Errorf("52 masters, at most 64: not deployable")
	}
}

func TestShardsFor(t *testing.T) {
	for m, want := range map[int]int{1: 1, 2: 16, 4: 16, 5: 32, 8: 32, 9: 64, 16: 64, 17: 128, 32: 128, 33: 256, 64: 256, 100: 256} {
		if got := ShardsFor(m); got != want {
			t.Errorf("ShardsFor(%d masters) = %d, want %d", m, got, want)
		}
	}
}

// The finished turns a week that fit in a master: its memory at the target over what a turn
// keeps for how long.
func TestFinishedTurnsPerWeekByHand(t *testing.T) {
	// 1e9 B × 0.5 / (10 B × 100 s + 20 B × 1000 s + 5 B × 2000 s) = 16129.03…/s, × 604800 s a week.
	if got, want := FinishedTurnsPerWeek(roundPerTurn, roundAssumptions), 1e9*0.5/31000*604800; math.Abs(got-want) > 1e-6*want {
		t.Errorf("FinishedTurnsPerWeek = %v, want %v", got, want)
	}
	if table := Table(roundPerTurn, roundAssumptions, nil); !strings.Contains(table, "keeps 9754838710 finished turns a week") {
		t.Errorf("the table does not say how many finished turns a week fit:\n%s", table)
	}
	f := roundPerTurn
	f.RedisMemoryOverhead = 2
	if got, want := FinishedTurnsPerWeek(f, roundAssumptions), 1e9*0.5/31000/2*604800; math.Abs(got-want) > 1e-6*want {
		t.Errorf("FinishedTurnsPerWeek with Redis's overhead 2 = %v, want %v", got, want)
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
		faster.RedisTurnCommandsPerSec-thinkCmds != 2*(base.RedisTurnCommandsPerSec-thinkCmds) {
		t.Errorf("doubling the new turns a second: workers by CPU %d → %d, retained %.0f → %.0f, commands/s %.0f → %.0f",
			base.WorkersByCPU, faster.WorkersByCPU, base.RedisRetained, faster.RedisRetained, base.RedisTurnCommandsPerSec, faster.RedisTurnCommandsPerSec)
	}
	// Half the target: twice the workers and masters. (Masters of 3.2 MB, so that this
	// load's 32 MB fill 20 of them at half their memory.)
	a := roundAssumptions
	a.MasterMemory = 3.2e6
	base = PlanFor(roundPerTurn, a, Load{Thinking: 10000, NewPerSec: 1000})
	a.Target /= 2
	half := PlanFor(roundPerTurn, a, Load{Thinking: 10000, NewPerSec: 1000})
	if base.MastersByMemory != 20 {
		t.Errorf("32 MB in masters of 3.2 MB filled half: %d masters, want 20", base.MastersByMemory)
	}
	if half.WorkersByMemory != 2*base.WorkersByMemory || half.MastersByMemory != 2*base.MastersByMemory {
		t.Errorf("half the target: workers by memory %d → %d, masters by memory %d → %d",
			base.WorkersByMemory, half.WorkersByMemory, base.MastersByMemory, half.MastersByMemory)
	}
	// One turn past what fits takes one worker more, never a fraction.
	fits := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 500})
	over := PlanFor(roundPerTurn, roundAssumptions, Load{Thinking: 501})
	if fits.Workers != 1 || over.Workers != 2 {
		t.Errorf("500 turns of 1000 B in 1e6 × 0.5 B: %d workers, 501: %d; want 1 and 2", fits.Workers, over.Workers)
	}
	// Retention is what the retained bytes scale with: a tenth of the journal's; the
	// replies' markers keep theirs.
	short := roundAssumptions
	short.JournalRetention /= 10
	p := PlanFor(roundPerTurn, short, Load{NewPerSec: 10})
	if p.RedisRetained != 10*(10*100+20*100+5*2000) {
		t.Errorf("retained with a tenth of the journal retention: %.0f, want 130000", p.RedisRetained)
	}
	// More shards, more idle polls: every worker polls every shard.
	if base.Shards < 2 || base.RedisIdleCommandsPerSec != float64(base.Workers*base.Shards)*roundPerTurn.RedisIdleCommandsPerShard {
		t.Errorf("%d workers, %d shards: %.0f idle commands/s, want workers × shards × %.0f",
			base.Workers, base.Shards, base.RedisIdleCommandsPerSec, roundPerTurn.RedisIdleCommandsPerShard)
	}
}

// Every load of the plan comes out deployable with today's figures: masters within the
// largest Cluster, shards within MaxShards and at least one a master, the journal retention
// the longest of the ladder that fits, and the table says what to set.
func TestEveryLoadHasAFiniteAnswer(t *testing.T) {
	table := Table(Measured, Defaults, Loads)
	for _, l := range Loads {
		c := Choose(Measured, Defaults, l)
		if !c.Deployable(Defaults) || c.Shards > shard.MaxShards || c.Shards < c.Masters || c.Masters > Defaults.MaxMasters {
			t.Errorf("%+v: %d masters, LETTAQ_SHARDS=%d, journal %v: not deployable", l, c.Masters, c.Shards, c.JournalRetention)
			continue
		}
		for _, r := range append([]time.Duration{Defaults.JournalRetention}, ShorterRetentions...) {
			if r <= c.JournalRetention {
				break
			}
			b := Defaults
			b.JournalRetention = r
			if PlanFor(Measured, b, l).Deployable(Defaults) {
				t.Errorf("%+v: the plan keeps the journal %v, but %v fits too", l, c.JournalRetention, r)
			}
		}
		advice := fmt.Sprintf("- %d thinking turns, %.0f new a second:", l.Thinking, l.NewPerSec)
		deploy := fmt.Sprintf("LETTAQ_JOURNAL_RETENTION=%s.", hours(c.JournalRetention))
		if c.Masters > 1 {
			deploy = fmt.Sprintf("a Redis Cluster of %d masters of 32.0 GiB, LETTAQ_SHARDS=%d, %s", c.Masters, c.Shards, deploy)
		}
		if !strings.Contains(table, advice) || !strings.Contains(table, deploy) {
			t.Errorf("the table does not say %q … %q:\n%s", advice, deploy, table)
		}
	}
	// 100,000 thinking turns at 1,000 new a second do not fit with the week's journal: the
	// table shows that row and the one with the retention the plan takes.
	l := Load{100000, 1000}
	if p := PlanFor(Measured, Defaults, l); p.Deployable(Defaults) {
		t.Errorf("100,000 thinking turns at 1,000 new a second fit in %d masters with the journal kept a week", p.Masters)
	}
	if c := Choose(Measured, Defaults, l); !strings.Contains(table, fmt.Sprintf("| ↳ 100000 | 1000 | %s |", days(c.JournalRetention))) {
		t.Errorf("no row with the journal kept %v:\n%s", c.JournalRetention, table)
	}
}

// A load no Cluster carries, whatever the retention, is said so, not planned.
func TestLoadPastEveryClusterIsSaid(t *testing.T) {
	a := Defaults
	a.MasterMemory = 1 << 20
	l := Load{100000, 1000}
	if c := Choose(Measured, a, l); c.Deployable(a) {
		t.Fatalf("1,000 new turns a second in masters of 1 MiB: %d masters", c.Masters)
	}
	if table := Table(Measured, a, []Load{l}); !strings.Contains(table, "no Cluster of at most 64 masters carries it") {
		t.Errorf("the table does not say the load fits no Cluster:\n%s", table)
	}
}

// The printed plan has a row per load, computed from the figures it names.
func TestCapacityTable(t *testing.T) {
	table := Table(Measured, Defaults, Loads)
	t.Log("\n" + table)
	for _, l := range Loads {
		p := PlanFor(Measured, Defaults, l)
		row := fmt.Sprintf("| %d | %.0f | 7d | %d (", l.Thinking, l.NewPerSec, p.Workers)
		if !strings.Contains(table, row) {
			t.Errorf("no row starting %q in\n%s", row, table)
		}
	}
	for _, want := range []string{fmt.Sprintf("%.0f B per thinking turn", float64(Measured.WorkerRSSPerThinkingTurn)), "planned at 50%", "kept 1d",
		fmt.Sprintf("× %.2f Redis overhead", Measured.RedisMemoryOverhead), fmt.Sprintf("%.1f commands/s per shard per idle worker", Measured.RedisIdleCommandsPerShard)} {
		if !strings.Contains(table, want) {
			t.Errorf("the table does not say %q", want)
		}
	}
}

func closePlan(a, b Plan) bool {
	near := func(x, y float64) bool { return x == y || (x-y)*(x-y) < 1e-18+1e-12*y*y }
	return a.Load == b.Load && a.JournalRetention == b.JournalRetention && a.WorkersByMemory == b.WorkersByMemory &&
		a.WorkersByCPU == b.WorkersByCPU && a.Workers == b.Workers && near(a.RedisInFlight, b.RedisInFlight) &&
		near(a.RedisRetained, b.RedisRetained) && near(a.RedisTurnCommandsPerSec, b.RedisTurnCommandsPerSec) &&
		near(a.RedisIdleCommandsPerSec, b.RedisIdleCommandsPerSec) && near(a.RedisCPU, b.RedisCPU) &&
		a.MastersByMemory == b.MastersByMemory && a.MastersByCPU == b.MastersByCPU && a.Masters == b.Masters && a.Shards == b.Shards
}
