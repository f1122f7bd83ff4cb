// Command bench measures lettaq against a real Redis and the Letta simulator, and prints one
// table:
//
//   - queue overhead: from enqueue to the request reaching Letta, and to the first
//     answer_delta event, against calling the simulator directly with agentclient (p50, p99);
//   - throughput: turns per second with instant agent turns, against a bare Asynq no-op handler
//     on the same Redis, and against a bare Asynq handler that streams the same turn from the
//     simulator and does nothing else (the integration lettaq replaces);
//   - concurrency: one worker holding many simultaneous turns whose agent thinks for a while
//     with pings flowing (the simulator runs in a child process, so the worker's memory is
//     measured alone): peak RSS, bytes per in-flight turn, and every turn answered once.
//
// Run it with:
//
//	go run ./integration/bench                      # full size: 10,000 concurrent turns
//	go run ./integration/bench -concurrent 500      # a quick run
//	go run ./integration/bench -latency 0 -concurrent 0 -rounds 7
//	                                                # the throughput ratio, median of 7 rounds
//	GOMEMLIMIT=450MiB go run ./integration/bench -latency 0 -throughput 0 -think 90s
//	                                                # the worker under a GC memory limit
//	go run ./integration/bench -stream-transport net/http   # streams through net/http's pool
//	go run ./integration/bench -relay               # the relay instead: 10,000 chats in flight
//	                                                # (docs/relay.md, Figures)
//	go run ./integration/bench -capacity            # the capacity plan past one machine from
//	                                                # today's per-turn figures (docs/performance.md)
//	GODEBUG=memprofilerate=512 go run ./integration/bench -latency 0 -throughput 0 -concurrent 3000 \
//	    -heapprofile /tmp/turn.heap      # a heap profile fine enough to count bytes per turn
//	                                     # (go tool pprof -sample_index=inuse_space -traces …)
//
// The table's heading names the GC settings (GOGC, GOMEMLIMIT; the simulator child runs
// without them) and the stream transport.
// Redis is REDIS_URL (default redis://127.0.0.1:6379/0); the benchmark uses its own queue
// names and key prefixes and removes nothing else.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/bench/capacity"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Config sizes a run.
type Config struct {
	RedisURL      string
	Latency       int           // sequential turns per latency measurement
	Throughput    int           // turns in the throughput measurement
	Concurrent    int           // simultaneous turns in the concurrency measurement (0 skips)
	Think         time.Duration // how long each concurrent turn thinks
	Ping          time.Duration // the simulator's ping interval in the concurrency run
	CheckInterval time.Duration // the worker's task check interval (pickup latency at idle)
	Workers       int           // concurrency of the worker in the throughput run
	// HeapProfile, when set, is where a heap profile is written once all
	// Concurrent turns are in flight (a goroutine profile goes beside it, with
	// ".goroutine" appended): what an in-flight turn costs, by allocation site.
	// A second one (".steady") follows while the turns only think: diffed
	// against the first, it shows what a thinking turn allocates, by site.
	HeapProfile string
	// StreamTransport of the worker's agent client.
	StreamTransport agentclient.StreamTransport
	// ThreadMode of the worker (default agent: docs/performance.md says which
	// figures were measured in which mode).
	ThreadMode queue.ThreadMode
	// CPUProfile, when set, is where a CPU profile of the throughput run's
	// lettaq part is written.
	CPUProfile string
	// AllocProfile, when set, is where a heap profile is written at the end
	// of the throughput run's lettaq part: its alloc_space is what the turns
	// allocated (and what ran before them, which is little).
	AllocProfile string
	// SimCPUProfile, when set, is where a CPU profile of the simulator
	// child is written: from its start to the end of the throughput run (its
	// lettaq turns; the simulator idles during the bare Asynq part). Not
	// with SimInProcess.
	SimCPUProfile string
	// TraceRedis prints, after the throughput and concurrency runs, what the
	// round trips to Redis were, by command (scripts by their first key).
	TraceRedis bool
	// SimInProcess runs the throughput run's simulator inside the benchmark's
	// process, beside the worker: the worker then
	// shares its Go scheduler with the simulated Letta server. By default the
	// simulator is a child process, as Letta is in production.
	SimInProcess bool
	// Rounds of the throughput measurement (lettaq's turns, then the bare
	// Asynq tasks, each round on queues of its own): the table shows the
	// round whose throughput ratio is the median, and every round's ratio.
	// On a shared machine one round's ratio moves by ±15%.
	Rounds int
	// Keep leaves the run's keys in Redis (queues, journal, reply streams,
	// ordering lines); by default they are deleted when the run ends, so
	// that repeated runs do not fill the Redis.
	Keep bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-serve-sim" {
		serveSim(os.Args[2:])
		return
	}
	var c Config
	flag.StringVar(&c.RedisURL, "redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis (env REDIS_URL)")
	flag.IntVar(&c.Latency, "latency", 300, "sequential turns for the overhead measurement")
	flag.IntVar(&c.Throughput, "throughput", 5000, "turns for the throughput measurement")
	flag.IntVar(&c.Concurrent, "concurrent", envInt("LETTAQ_BENCH_CONCURRENT", 10000), "simultaneous turns (env LETTAQ_BENCH_CONCURRENT; 0 skips)")
	flag.DurationVar(&c.Think, "think", 30*time.Second, "how long each concurrent turn thinks")
	flag.DurationVar(&c.Ping, "ping", time.Second, "the simulator's ping interval during the concurrency run")
	flag.DurationVar(&c.CheckInterval, "check-interval", 10*time.Millisecond, "the worker's LETTAQ_TASK_CHECK_INTERVAL")
	flag.IntVar(&c.Rounds, "rounds", 1, "rounds of the throughput measurement (lettaq, then bare Asynq, each round): the table shows the median round's figures and every round's ratio")
	flag.IntVar(&c.Workers, "workers", 200, "the worker's concurrency in the throughput run")
	flag.StringVar(&c.HeapProfile, "heapprofile", "", "write a heap profile (and FILE.goroutine) when all concurrent turns are in flight")
	st := flag.String("stream-transport", string(agentclient.StreamDedicated), `the worker's LETTA_STREAM_TRANSPORT: "dedicated" or "net/http"`)
	tm := flag.String("thread-mode", string(queue.ThreadConversation), `the worker's LETTAQ_THREAD_MODE: "agent", "conversation" (the product's default) or "default"`)
	flag.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the throughput run (lettaq's turns) to this file")
	flag.StringVar(&c.AllocProfile, "allocprofile", "", "write a heap profile at the end of the throughput run's lettaq turns to this file (go tool pprof -sample_index=alloc_space)")
	flag.StringVar(&c.SimCPUProfile, "sim-cpuprofile", "", "write a CPU profile of the simulator child during the throughput run to this file (with the default child-process simulator)")
	flag.BoolVar(&c.TraceRedis, "trace-redis", false, "print the Redis round trips of a turn by command")
	flag.BoolVar(&c.Keep, "keep", false, "leave the run's keys in Redis (default: delete them when the run ends)")
	flag.BoolVar(&c.SimInProcess, "sim-in-process", false, "run the throughput run's simulator in the benchmark's process (default: a child process, as Letta is a server of its own)")
	perTurn, assume := capacityFlags(flag.CommandLine)
	planOnly := flag.Bool("capacity", false, "print the capacity plan past one machine from the -per-* figures (today's by default) and the -plan-* assumptions, and exit (needs no Redis)")
	var rc RelayConfig
	relayMode := flag.Bool("relay", false, "measure the relay instead (docs/relay.md, Figures): events/s, platform calls per turn, lag, memory per in-flight chat; prints its own table and exits")
	flag.StringVar(&rc.RedisURL, "relay-redis", "", "the relay run's Redis (default: a redis-server of its own, without persistence, on a free loopback port)")
	flag.IntVar(&rc.Chats, "relay-chats", 10000, "chats with a turn in flight")
	flag.IntVar(&rc.Deltas, "relay-deltas", 20, "answer_delta events of 100 characters per answer")
	replicas := flag.String("relay-replicas", "1,2", "relay replica counts, one run each")
	flag.IntVar(&rc.Workers, "relay-workers", 32, "workers per replica (LETTAQ_RELAY_WORKERS)")
	flag.DurationVar(&rc.Latency, "relay-latency", 0, "added to every platform call")
	flag.IntVar(&rc.Quick, "relay-quick", 500, "quick answers written live")
	flag.IntVar(&rc.Streamed, "relay-streamed", 200, "streamed answers written live")
	flag.DurationVar(&rc.StreamFor, "relay-stream-for", 10*time.Second, "how long a streamed answer takes to write")
	flag.Parse()
	if *relayMode {
		for _, f := range strings.Split(*replicas, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "bench: -relay-replicas: %q is not a replica count\n", f)
				os.Exit(2)
			}
			rc.Replicas = append(rc.Replicas, n)
		}
		raiseFileLimit()
		res, err := RunRelay(context.Background(), rc, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Print(res.Table())
		return
	}
	if *planOnly {
		if assume.Target <= 0 || assume.Target > 1 {
			fmt.Fprintln(os.Stderr, "bench: -plan-target must be in (0,1]")
			os.Exit(2)
		}
		fmt.Print(capacity.Table(*perTurn, *assume, capacity.Loads))
		return
	}
	var err error
	if err = c.ThreadMode.UnmarshalText([]byte(*tm)); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -thread-mode:", err)
		os.Exit(2)
	}
	if c.StreamTransport, err = agentclient.ParseStreamTransport(*st); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -stream-transport:", err)
		os.Exit(2)
	}
	raiseFileLimit()
	res, err := Run(context.Background(), c, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(res.Table())
	if f, ok := res.PerTurn(*perTurn); ok {
		fmt.Print("\nThe capacity plan past one machine, from this run's figures:\n\n" + capacity.Table(f, *assume, capacity.Loads))
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func envInt(k string, d int) int {
	if n, err := strconv.Atoi(os.Getenv(k)); err == nil {
		return n
	}
	return d
}

// raiseFileLimit lifts the soft limit on open files to the hard one: every in-flight turn
// holds a socket (and the simulator the other end).
func raiseFileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	rl.Cur = rl.Max
	err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	return rl.Cur, err
}

// Results of a run.
type Results struct {
	Config Config
	// Run is the run's id: its queue names and keys contain it.
	Run string
	// Overhead
	QueueReach, DirectReach []time.Duration
	QueueFirst, DirectFirst []time.Duration
	// Throughput
	TurnsPerSec, NoopPerSec float64
	// NaivePerSec: bare Asynq tasks whose handler streams the same instant
	// turn from the simulator and does nothing else (see naive), with its
	// CPU (bench process, simulator) and Redis's.
	NaivePerSec    float64
	NaiveCPU       cpuSpent
	NaiveRedisTime time.Duration
	// RoundRatios: every round's throughput ratio, in the order they ran
	// (Config.Rounds > 1); the other throughput figures are the median
	// round's.
	RoundRatios []float64
	// Redis round trips and commands per turn / per no-op task, from enqueue
	// to done (client and worker; polling while the run lasts included).
	TurnTrips, TurnCmds, NoopTrips, NoopCmds float64
	// The mean round trip of Asynq's dequeue during the lettaq and the no-op
	// runs: its processor dequeues one task at a time, so this bounds the
	// rate at which tasks start.
	TurnDequeue, NoopDequeue time.Duration
	// Redis's main thread CPU (INFO cpu) per instant turn and per no-op task.
	TurnRedisTime, NoopRedisTime time.Duration
	// CPU per instant turn and per no-op task: the bench's process (the
	// worker and the enqueuing client; for no-op tasks the bare Asynq server
	// and client), the simulator's process (a child unless SimInProcess), and
	// how busy the machine was meanwhile. On a machine whose CPUs are all
	// busy, throughput follows the CPU that all processes spend per turn.
	TurnCPU, NoopCPU cpuSpent
	// Commands Redis ran per instant turn / no-op task, those inside
	// scripts included (INFO commandstats; scripts' own calls not counted),
	// and by name.
	TurnRedisCalls, NoopRedisCalls float64
	TurnRedisTop, NoopRedisTop     []nameCount
	// TurnRedisBytes: what an instant turn leaves in Redis once finished
	// (its Asynq task and result; its journal record, reply stream and
	// markers), by retention class. ThinkRedisBytes: what a thinking turn
	// holds in Redis while every turn is in flight. Zero when Redis has no
	// MEMORY USAGE.
	TurnRedisBytes, ThinkRedisBytes redisBytes
	// ThinkCmdsPerMin: Redis commands per minute per thinking turn (the
	// worker, every turn in flight); ThinkTripsPerMin the round trips.
	ThinkCmdsPerMin, ThinkTripsPerMin float64
	// Concurrency
	Concurrent       int
	PeakRSS, BaseRSS uint64
	PeakInFlight     int64
	Answered         int64
	UserMessages     int
	DuplicateOtids   int
	ConcurrentTime   time.Duration
	Failed           int64
	FileLimit        uint64
	// What one in-flight turn holds, measured after a GC once all Concurrent
	// turns are in flight: live heap, goroutine stacks, goroutines.
	HeapPerTurn, StackPerTurn uint64
	GoroutinesPerTurn         float64
	// StackPerTurnLate is the goroutine stacks per turn later in the think
	// (when ThinkCmdsPerMin is measured), with no GC forced: the runtime
	// halves a stack at most once per GC, so the forced GC of StackPerTurn
	// catches the handlers halfway down.
	StackPerTurnLate uint64
	// AllocPerTurnSecond is what a thinking turn allocates per second (it
	// receives one ping a second): the garbage that makes the heap grow
	// between collections. Measured over 5 s with every turn in flight.
	AllocPerTurnSecond uint64
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// Table renders the results as Markdown.
func (r *Results) Table() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "lettaq benchmark: %s, %d CPUs, Go %s, task check interval %v, thread mode %s, streams %s, %s\n\n", c.RedisURL, runtime.NumCPU(), runtime.Version(), c.CheckInterval, c.ThreadMode, c.StreamTransport, gcSettings())
	b.WriteString("| measure | lettaq | direct / bare Asynq | lettaq adds |\n|---|---|---|---|\n")
	row := func(name string, q, d []time.Duration, p float64) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, ms(pct(q, p)), ms(pct(d, p)), ms(pct(q, p)-pct(d, p)))
	}
	if len(r.QueueReach) > 0 {
		row(fmt.Sprintf("request reaches Letta, p50 (%d turns, idle)", len(r.QueueReach)), r.QueueReach, r.DirectReach, 0.5)
		row("request reaches Letta, p99", r.QueueReach, r.DirectReach, 0.99)
		row("first answer text (answer_delta event), p50", r.QueueFirst, r.DirectFirst, 0.5)
		row("first answer text (answer_delta event), p99", r.QueueFirst, r.DirectFirst, 0.99)
	}
	if r.TurnsPerSec > 0 {
		fmt.Fprintf(&b, "| throughput, instant turns (%d turns, concurrency %d) | %.0f turns/s | %.0f tasks/s (no-op handler) | ratio %.2f |\n",
			c.Throughput, c.Workers, r.TurnsPerSec, r.NoopPerSec, r.ratio())
		if len(r.RoundRatios) > 1 {
			s := slices.Clone(r.RoundRatios)
			slices.Sort(s)
			each := make([]string, len(r.RoundRatios))
			for i, v := range r.RoundRatios {
				each[i] = fmt.Sprintf("%.2f", v)
			}
			fmt.Fprintf(&b, "| throughput ratio over %d rounds (this table: the median round's figures) | median %.2f | min %.2f, max %.2f | rounds: %s |\n",
				len(s), r.ratio(), s[0], s[len(s)-1], strings.Join(each, " "))
		}
		fmt.Fprintf(&b, "| Redis round trips (commands) per instant turn, enqueue to done | %.1f (%.1f) | %.1f (%.1f) per no-op task | %.1f (%.1f) |\n",
			r.TurnTrips, r.TurnCmds, r.NoopTrips, r.NoopCmds, r.TurnTrips-r.NoopTrips, r.TurnCmds-r.NoopCmds)
		if r.TurnRedisTime > 0 && r.NoopRedisTime > 0 {
			fmt.Fprintf(&b, "| Redis main thread CPU per instant turn (INFO cpu) | %.0f µs | %.0f µs per no-op task | %.0f µs |\n",
				float64(r.TurnRedisTime)/1e3, float64(r.NoopRedisTime)/1e3, float64(r.TurnRedisTime-r.NoopRedisTime)/1e3)
		}
		if r.TurnRedisCalls > 0 && r.NoopRedisCalls > 0 {
			fmt.Fprintf(&b, "| commands Redis runs per instant turn, inside scripts too (INFO commandstats) | %.1f: %s | %.1f: %s | %.1f |\n",
				r.TurnRedisCalls, topCalls(r.TurnRedisTop, c.Throughput), r.NoopRedisCalls, topCalls(r.NoopRedisTop, c.Throughput), r.TurnRedisCalls-r.NoopRedisCalls)
		}
		if r.TurnCPU.Self > 0 && r.NoopCPU.Self > 0 {
			fmt.Fprintf(&b, "| bench process CPU per instant turn (worker + enqueuing client) | %.0f µs | %.0f µs per no-op task (server + client) | %.0f µs |\n",
				float64(r.TurnCPU.Self)/1e3, float64(r.NoopCPU.Self)/1e3, float64(r.TurnCPU.Self-r.NoopCPU.Self)/1e3)
		}
		if r.TurnCPU.Mallocs > 0 && r.NoopCPU.Mallocs > 0 {
			fmt.Fprintf(&b, "| bench process allocates per instant turn | %d B, %d objects | %d B, %d objects per no-op task | %.1f× the bytes |\n",
				r.TurnCPU.Alloc, r.TurnCPU.Mallocs, r.NoopCPU.Alloc, r.NoopCPU.Mallocs, float64(r.TurnCPU.Alloc)/float64(r.NoopCPU.Alloc))
		}
		if t, n := r.TurnCPU, r.NoopCPU; t.Waits > 0 && n.Waits > 0 {
			fmt.Fprintf(&b, "| bench process scheduler (runtime/metrics): goroutines started per instant turn; mean wait runnable before running; GC cycles per 1000 turns | %.1f; %.0f µs; %.1f | %.1f; %.0f µs; %.1f (per no-op task) | |\n",
				t.Goroutines, float64(t.RunnableWait)/1e3, 1000*t.GCs, n.Goroutines, float64(n.RunnableWait)/1e3, 1000*n.GCs)
		}
		if r.TurnCPU.ChildOK {
			fmt.Fprintf(&b, "| simulator process CPU per instant turn (Letta's part: not lettaq's) | %.0f µs | | |\n", float64(r.TurnCPU.Child)/1e3)
		}
		if r.TurnCPU.Self > 0 && r.NoopCPU.Self > 0 && r.TurnRedisTime > 0 && r.NoopRedisTime > 0 && r.TurnCPU.ChildOK {
			// The run is bound by the machine's CPU: the throughput ratio
			// follows this one, which a busy neighbour moves less.
			turn := float64(r.TurnCPU.Self + r.TurnRedisTime + r.TurnCPU.Child)
			noop := float64(r.NoopCPU.Self + r.NoopRedisTime)
			fmt.Fprintf(&b, "| all CPU per instant turn: bench process + Redis + simulator | %.0f µs | %.0f µs per no-op task (bench process + Redis) | ratio %.2f |\n",
				turn/1e3, noop/1e3, noop/turn)
		}
		if t, n := r.TurnCPU, r.NoopCPU; t.IOOK && n.IOOK {
			redis, sim := "", ""
			if t.RedisIOOK && n.RedisIOOK {
				redis = fmt.Sprintf("; Redis %.1f / %.1f", t.RedisReads, t.RedisWrites)
			}
			if t.ChildIOOK {
				sim = fmt.Sprintf("; simulator %.1f / %.1f", t.ChildReads, t.ChildWrites)
			}
			nredis := ""
			if n.RedisIOOK {
				nredis = fmt.Sprintf("; Redis %.1f / %.1f", n.RedisReads, n.RedisWrites)
			}
			fmt.Fprintf(&b, "| read / write system calls per instant turn (/proc/<pid>/io) | bench process %.1f / %.1f%s%s | bench process %.1f / %.1f%s per no-op task | |\n",
				t.Reads, t.Writes, redis, sim, n.Reads, n.Writes, nredis)
		}
		if r.NaivePerSec > 0 {
			cpu := ""
			if r.NaiveCPU.Self > 0 && r.NaiveRedisTime > 0 && r.NaiveCPU.ChildOK && r.TurnCPU.ChildOK {
				naive := float64(r.NaiveCPU.Self + r.NaiveRedisTime + r.NaiveCPU.Child)
				turn := float64(r.TurnCPU.Self + r.TurnRedisTime + r.TurnCPU.Child)
				cpu = fmt.Sprintf("; all CPU per task %.0f µs (bench %.0f, Redis %.0f, simulator %.0f): lettaq's turn %.2f× it",
					naive/1e3, float64(r.NaiveCPU.Self)/1e3, float64(r.NaiveRedisTime)/1e3, float64(r.NaiveCPU.Child)/1e3, turn/naive)
			}
			fmt.Fprintf(&b, "| bare Asynq handler that streams the same instant turn from the simulator and does nothing else (no journal, ordering, reply events) | | %.0f tasks/s%s | lettaq / this: ratio %.2f |\n",
				r.NaivePerSec, cpu, r.TurnsPerSec/r.NaivePerSec)
		}
		if r.TurnCPU.Busy > 0 && r.NoopCPU.Busy > 0 {
			fmt.Fprintf(&b, "| machine CPU busy during the run (all %d CPUs) | %.0f%% | %.0f%% | |\n", runtime.NumCPU(), 100*r.TurnCPU.Busy, 100*r.NoopCPU.Busy)
		}
		if m := r.TurnRedisBytes; m.Total() > 0 {
			fmt.Fprintf(&b, "| Redis memory a finished instant turn leaves (MEMORY USAGE of the run's keys; Asynq's kept 24h, lettaq's the journal retention, the replies' markers 7 days) | %d bytes (Asynq %d, lettaq %d of which markers %d) | | |\n", m.Total(), m.Asynq, m.Lettaq, m.Markers)
		}
		if r.TurnDequeue > 0 && r.NoopDequeue > 0 {
			fmt.Fprintf(&b, "| Asynq's dequeue round trip, mean (one at a time: it paces task starts) | %.0f µs | %.0f µs | %.1f× |\n",
				float64(r.TurnDequeue)/1e3, float64(r.NoopDequeue)/1e3, float64(r.TurnDequeue)/float64(r.NoopDequeue))
		}
	}
	if r.Concurrent > 0 {
		per := int64(0)
		if r.PeakInFlight > 0 && r.PeakRSS > r.BaseRSS {
			per = int64(r.PeakRSS-r.BaseRSS) / r.PeakInFlight
		}
		fmt.Fprintf(&b, "| concurrency: %d turns thinking %v (pings every %v) | peak %d in flight, all done in %.1fs | | |\n",
			r.Concurrent, c.Think, c.Ping, r.PeakInFlight, r.ConcurrentTime.Seconds())
		fmt.Fprintf(&b, "| worker peak RSS | %.0f MB (idle %.0f MB) | | %d bytes per in-flight turn |\n",
			float64(r.PeakRSS)/(1<<20), float64(r.BaseRSS)/(1<<20), per)
		if r.HeapPerTurn > 0 {
			fmt.Fprintf(&b, "| one in-flight turn holds (after a GC) | %d bytes live heap, %d bytes of stacks, %.1f goroutines | | |\n",
				r.HeapPerTurn, r.StackPerTurn, r.GoroutinesPerTurn)
		}
		if r.StackPerTurnLate > 0 {
			fmt.Fprintf(&b, "| stacks per in-flight turn later in the think (no GC forced) | %d bytes | | |\n", r.StackPerTurnLate)
		}
		if m := r.ThinkRedisBytes; m.Total() > 0 {
			fmt.Fprintf(&b, "| Redis memory per in-flight thinking turn (MEMORY USAGE of the run's keys) | %d bytes (Asynq %d, lettaq %d) | | |\n", m.Total(), m.Asynq, m.Lettaq)
		}
		if r.ThinkCmdsPerMin > 0 {
			fmt.Fprintf(&b, "| Redis commands (round trips) per minute per thinking turn | %.1f (%.1f) | | |\n", r.ThinkCmdsPerMin, r.ThinkTripsPerMin)
		}
		if r.AllocPerTurnSecond > 0 {
			fmt.Fprintf(&b, "| a thinking turn allocates | %d bytes per second | | |\n", r.AllocPerTurnSecond)
		}
		fmt.Fprintf(&b, "| answered / user messages at Letta / duplicate otids / failed | %d / %d / %d / %d | | |\n",
			r.Answered, r.UserMessages, r.DuplicateOtids, r.Failed)
	}
	return b.String()
}

// counter is a queue.Observer that counts finished turns and in-flight attempts.
type counter struct {
	queue.NopObserver
	answered, failed, inFlight, peak atomic.Int64
	done                             chan struct{}
	want                             int64
	once                             sync.Once
}

func newCounter(want int) *counter { return &counter{done: make(chan struct{}), want: int64(want)} }

func (c *counter) TaskStarted(string, int, time.Duration) {
	n := c.inFlight.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
}
func (c *counter) AttemptFinished(string, string, time.Duration) { c.inFlight.Add(-1) }
func (c *counter) TurnFinished(_ string, outcome string, _, _ time.Duration) {
	if outcome == record.OutcomeAnswered {
		c.answered.Add(1)
	} else {
		c.failed.Add(1)
	}
	if c.answered.Load()+c.failed.Load() >= c.want {
		c.once.Do(func() { close(c.done) })
	}
}

// Run runs every measurement and returns the results; log receives progress.
func Run(ctx context.Context, c Config, log io.Writer) (*Results, error) {
	opt, err := asynq.ParseRedisURI(c.RedisURL)
	if err != nil {
		return nil, err
	}
	rco, ok := opt.(asynq.RedisClientOpt)
	if !ok {
		return nil, fmt.Errorf("the benchmark wants a plain redis:// URL")
	}
	rco.PoolSize = 256
	rdb := redis.NewClient(&redis.Options{Addr: rco.Addr, DB: rco.DB, Password: rco.Password})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", rco.Addr, err)
	}
	if c.StreamTransport == "" {
		c.StreamTransport = agentclient.StreamDedicated
	}
	if c.ThreadMode == "" {
		c.ThreadMode = queue.ThreadAgent
	}
	r := &Results{Config: c}
	r.FileLimit, _ = raiseFileLimit()
	run := strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	r.Run = run
	if !c.Keep {
		defer func() {
			if err := cleanup(context.WithoutCancel(ctx), rdb, run); err != nil {
				fmt.Fprintf(log, "cleanup: %v (the run's keys contain %q)\n", err, run)
			}
		}()
	}
	if c.Latency > 0 {
		fmt.Fprintf(log, "overhead: %d sequential turns through the queue, %d direct…\n", c.Latency, c.Latency)
		if err := overhead(ctx, c, rco, rdb, run, r); err != nil {
			return nil, fmt.Errorf("overhead: %w", err)
		}
	}
	if c.Throughput > 0 {
		if err := throughputRounds(ctx, c, rco, rdb, run, r, log); err != nil {
			return nil, fmt.Errorf("throughput: %w", err)
		}
	}
	if c.Concurrent > 0 {
		fmt.Fprintf(log, "concurrency: %d turns thinking %v (file limit %d)…\n", c.Concurrent, c.Think, r.FileLimit)
		if err := concurrency(ctx, c, rco, run, r, log); err != nil {
			return nil, fmt.Errorf("concurrency: %w", err)
		}
	}
	return r, nil
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// discardAsynqLog is the Asynq logger of the bench's bare Asynq server: it
// writes nothing (as quiet), and exits on Fatal as Asynq expects.
type discardAsynqLog struct{}

func (discardAsynqLog) Debug(...any) {}
func (discardAsynqLog) Info(...any)  {}
func (discardAsynqLog) Warn(...any)  {}
func (discardAsynqLog) Error(...any) {}
func (discardAsynqLog) Fatal(...any) { os.Exit(1) }

func newWorker(c Config, rco asynq.RedisConnOpt, lettaURL, qname, prefix string, concurrency int, obs queue.Observer) (*queue.Worker, error) {
	return queue.NewWorker(queue.WorkerConfig{
		Redis: rco, Letta: queue.LettaConnection{URL: lettaURL, StreamTransport: c.StreamTransport},
		Budget: budget.Default(), Concurrency: concurrency,
		Queues: map[string]int{qname: 1}, ShutdownTimeout: 5 * time.Second, Logger: quiet,
		WorkerID: "bench",
		Stores:   queue.WorkerStores{RepliesOptions: queue.RepliesOptions{Prefix: prefix}, JournalOptions: queue.JournalOptions{Prefix: prefix}},
		Observer: obs, Timing: queue.WorkerTiming{TaskCheckInterval: c.CheckInterval},
		ThreadMode: c.ThreadMode,
	})
}

// startQueue starts a worker on its own queue and a client for that queue;
// stop closes the client and shuts the worker down.
func startQueue(ctx context.Context, c Config, rco asynq.RedisConnOpt, lettaURL, qname, prefix string, concurrency int, obs queue.Observer) (client *queue.Client, stop func(), err error) {
	w, err := newWorker(c, rco, lettaURL, qname, prefix, concurrency, obs)
	if err != nil {
		return nil, nil, err
	}
	client, err = queue.NewClient(queue.ClientConfig{Redis: rco, Queue: qname})
	if err != nil {
		return nil, nil, err
	}
	stopWorker := startWorker(ctx, w)
	return client, func() { _ = client.Close(); stopWorker() }, nil
}

func startWorker(ctx context.Context, w *queue.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// benchAgent is a fixed, Letta-shaped agent id ("agent-<uuid4>") that the simulator creates on
// first use (AutoCreateAgents): the sim subprocess and the enqueuer agree on it without talking.
func benchAgent(kind, i int) string {
	return fmt.Sprintf("agent-%08x-0000-4000-8000-%012x", kind, i)
}

func overhead(ctx context.Context, c Config, rco asynq.RedisClientOpt, rdb *redis.Client, run string, r *Results) error {
	sim := lettasim.NewServer(lettasim.Config{AutoCreateAgents: true, DefaultScript: lettasim.QuickScript("ok")})
	defer sim.Close()
	qname, prefix := "bench-lat-"+run, "lettaq-bench-"+run+":"
	client, stop, err := startQueue(ctx, c, rco, sim.URL, qname, prefix, 10, nil)
	if err != nil {
		return err
	}
	defer stop()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	// one runs a turn through the queue and times it: to the request reaching
	// the simulator, and to the first answer text. It returns when the
	// turn's final event is in the stream, so every turn meets an idle worker.
	one := func(i int) (reach, first time.Duration, err error) {
		conv := record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("lat-%s-%d", run, i)}
		t0 := time.Now()
		res, err := client.Enqueue(ctx, queue.Message{AgentID: benchAgent(1, 0), Text: "hi", Conversation: conv})
		if err != nil {
			return 0, 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		rec, err := sim.WaitOtid(wctx, res.Otid)
		if err != nil {
			return 0, 0, fmt.Errorf("turn %d never reached the simulator: %w", i, err)
		}
		after, final := "0", false
		var firstAt time.Time
		for !final {
			evs, last, err := replies.Read(wctx, conv, after, 100, time.Second)
			if err != nil {
				return 0, 0, err
			}
			after = last
			for _, ev := range evs {
				if firstAt.IsZero() && ((ev.Type == record.EventAnswerDelta && !ev.Narration) || ev.Type == record.EventAnswer) {
					firstAt = ev.Time
				}
				final = final || ev.Type.Final()
			}
		}
		return rec.At.Sub(t0), firstAt.Sub(t0), nil
	}
	// A warm-up turn, not measured: the worker is polling and connected.
	if _, _, err := one(-1); err != nil {
		return err
	}
	for i := range c.Latency {
		reach, first, err := one(i)
		if err != nil {
			return err
		}
		r.QueueReach = append(r.QueueReach, reach)
		r.QueueFirst = append(r.QueueFirst, first)
		time.Sleep(time.Duration(i%7) * time.Millisecond) // do not phase-lock with the poll interval
	}
	// Direct: agentclient straight to the simulator.
	ac, err := agentclient.New(agentclient.Config{BaseURL: sim.URL})
	if err != nil {
		return err
	}
	for range c.Latency {
		otid := uuid.NewString()
		var first time.Time
		t0 := time.Now()
		err := ac.SendStream(ctx, agentclient.SendRequest{AgentID: benchAgent(1, 0), Text: "hi", Otid: otid}, agentclient.NewStreamState(),
			agentclient.StreamOptions{OnEvent: func(ev agentclient.Event) {
				if _, ok := ev.Message.(*agentclient.AssistantMessage); ok && first.IsZero() {
					first = time.Now()
				}
			}})
		if err != nil {
			return err
		}
		rec, err := sim.WaitOtid(ctx, otid)
		if err != nil {
			return err
		}
		r.DirectReach = append(r.DirectReach, rec.At.Sub(t0))
		r.DirectFirst = append(r.DirectFirst, first.Sub(t0))
	}
	return nil
}

// throughputRounds runs c.Rounds rounds of throughput (at least one), each
// on queues and keys of its own, and keeps in r the figures of the round
// whose throughput ratio is the median (the lower middle of an even count),
// and every round's ratio.
func throughputRounds(ctx context.Context, c Config, rco asynq.RedisClientOpt, rdb *redis.Client, run string, r *Results, log io.Writer) error {
	n := max(c.Rounds, 1)
	rounds := make([]*Results, 0, n)
	for i := range n {
		id := run
		if i > 0 {
			id = fmt.Sprintf("%sr%d", run, i)
			if !c.Keep {
				defer func() {
					if err := cleanup(context.WithoutCancel(ctx), rdb, id); err != nil {
						fmt.Fprintf(log, "cleanup: %v (the run's keys contain %q)\n", err, id)
					}
				}()
			}
		}
		fmt.Fprintf(log, "throughput, round %d of %d: %d instant turns, then %d no-op tasks, then %d plain-integration tasks…\n", i+1, n, c.Throughput, c.Throughput, c.Throughput)
		rr := &Results{Config: c}
		if err := throughput(ctx, c, rco, rdb, id, rr, log); err != nil {
			return err
		}
		rounds = append(rounds, rr)
	}
	byRatio := slices.Clone(rounds)
	sort.SliceStable(byRatio, func(i, j int) bool { return byRatio[i].ratio() < byRatio[j].ratio() })
	m := byRatio[(len(byRatio)-1)/2]
	keep := *r
	*r = *m
	r.Config, r.FileLimit, r.Run = keep.Config, keep.FileLimit, keep.Run
	r.QueueReach, r.DirectReach, r.QueueFirst, r.DirectFirst = keep.QueueReach, keep.DirectReach, keep.QueueFirst, keep.DirectFirst
	for _, rr := range rounds {
		r.RoundRatios = append(r.RoundRatios, rr.ratio())
	}
	return nil
}

// ratio is the throughput ratio: lettaq's turns per second over bare
// Asynq's tasks per second.
func (r *Results) ratio() float64 {
	if r.NoopPerSec == 0 {
		return 0
	}
	return r.TurnsPerSec / r.NoopPerSec
}

func throughput(ctx context.Context, c Config, rco asynq.RedisClientOpt, rdb *redis.Client, run string, r *Results, log io.Writer) error {
	var simURL string
	simPID := 0
	if c.SimInProcess {
		sim := lettasim.NewServer(lettasim.Config{AutoCreateAgents: true, DefaultScript: lettasim.QuickScript("ok")})
		defer sim.Close()
		simURL = sim.URL
	} else {
		args := []string{"-think", "0"}
		if c.SimCPUProfile != "" {
			args = append(args, "-cpuprofile", c.SimCPUProfile)
		}
		child, err := startSimChild(ctx, args...)
		if err != nil {
			return err
		}
		defer child.stop()
		simURL, simPID = child.url, child.cmd.Process.Pid
		if c.SimCPUProfile != "" {
			// The child writes its profile when its stdin closes (stats).
			defer func() { _, _ = child.stats() }()
		}
	}
	qname, prefix := "bench-tp-"+run, "lettaq-bench-"+run+":"
	cnt := newCounter(c.Throughput)
	rc := &redisCounter{}
	client, stop, err := startQueue(ctx, c, countingOpt{rco, rc, true}, simURL, qname, prefix, c.Workers, cnt)
	if err != nil {
		return err
	}
	mem0, memErr := measureRedisBytes(ctx, rdb, qname, prefix)
	rc.trace.Store(c.TraceRedis)
	trips0, cmds0 := rc.snapshot()
	rc.dequeueRTT() // from here on
	rt0, _ := redisServerTime(ctx, rdb)
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			stop()
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			stop()
			return err
		}
	}
	redisPID := redisLocalPID(ctx, rdb)
	cpu0 := markCPU(simPID, redisPID)
	calls0, _ := redisCalls(ctx, rdb)
	t0 := time.Now()
	if err := parallel(c.Throughput, func(i int) error {
		_, err := client.Enqueue(ctx, queue.Message{AgentID: benchAgent(2, i%64), Text: "hi",
			Conversation: record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("tp-%s-%d", run, i)}})
		return err
	}); err != nil {
		stop()
		return err
	}
	select {
	case <-cnt.done:
	case <-time.After(5 * time.Minute):
		stop()
		return fmt.Errorf("only %d of %d turns finished", cnt.answered.Load(), c.Throughput)
	}
	r.TurnsPerSec = float64(c.Throughput) / time.Since(t0).Seconds()
	r.TurnCPU = spentCPU(cpu0, markCPU(simPID, redisPID), c.Throughput)
	if c.AllocProfile != "" {
		if f, err := os.Create(c.AllocProfile); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}
	calls1, _ := redisCalls(ctx, rdb)
	r.TurnRedisCalls, r.TurnRedisTop = callsPer(calls0, calls1, c.Throughput)
	trips1, cmds1 := rc.snapshot()
	if c.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	r.TurnTrips, r.TurnCmds = float64(trips1-trips0)/float64(c.Throughput), float64(cmds1-cmds0)/float64(c.Throughput)
	r.TurnDequeue = rc.dequeueRTT()
	if rt1, err := redisServerTime(ctx, rdb); err == nil && rt0 > 0 {
		r.TurnRedisTime = (rt1 - rt0) / time.Duration(c.Throughput)
	}
	if mem1, err := measureRedisBytes(ctx, rdb, qname, prefix); err == nil && memErr == nil {
		r.TurnRedisBytes = mem1.per(mem0, c.Throughput)
	}
	stop()
	if c.TraceRedis {
		printTrace(log, "an instant turn's", rc.names(), float64(c.Throughput))
	}

	// The same number of bare Asynq tasks with a no-op handler.
	nc := &redisCounter{}
	r.NoopPerSec, err = bareTasks(ctx, c, countingOpt{rco, nc, false}, "noop", run,
		func(int) []byte { return []byte(`{"i":1}`) }, func(context.Context, *asynq.Task) {},
		func() {
			nc.trace.Store(c.TraceRedis)
			trips0, cmds0 = nc.snapshot()
			nc.dequeueRTT()
			rt0, _ = redisServerTime(ctx, rdb)
			cpu0 = markCPU(0, redisPID)
			calls0, _ = redisCalls(ctx, rdb)
		}, func() {
			r.NoopCPU = spentCPU(cpu0, markCPU(0, redisPID), c.Throughput)
			calls1, _ = redisCalls(ctx, rdb)
			r.NoopRedisCalls, r.NoopRedisTop = callsPer(calls0, calls1, c.Throughput)
			trips1, cmds1 = nc.snapshot()
			r.NoopTrips, r.NoopCmds = float64(trips1-trips0)/float64(c.Throughput), float64(cmds1-cmds0)/float64(c.Throughput)
			r.NoopDequeue = nc.dequeueRTT()
			if rt1, err := redisServerTime(ctx, rdb); err == nil && rt0 > 0 {
				r.NoopRedisTime = (rt1 - rt0) / time.Duration(c.Throughput)
			}
		})
	if err != nil {
		return err
	}
	if c.TraceRedis {
		printTrace(log, "a no-op task's", nc.names(), float64(c.Throughput))
	}
	return naive(ctx, c, rco, rdb, run, simURL, simPID, redisPID, r)
}

// bareTasks runs c.Throughput bare Asynq tasks on a queue of their own ("bench-<kind>-<run>"),
// with payload(i) and handled by handle, on clients made from rco. mark runs right before the
// first enqueue and done right after the last task was handled. It returns the tasks per
// second.
func bareTasks(ctx context.Context, c Config, rco asynq.RedisConnOpt, kind, run string, payload func(i int) []byte,
	handle func(context.Context, *asynq.Task), mark, done func()) (float64, error) {
	q := "bench-" + kind + "-" + run
	var n atomic.Int64
	all := make(chan struct{})
	srv := asynq.NewServer(rco, asynq.Config{Concurrency: c.Workers, Queues: map[string]int{q: 1},
		TaskCheckInterval: c.CheckInterval, Logger: discardAsynqLog{}, LogLevel: asynq.ErrorLevel})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		handle(ctx, t)
		if n.Add(1) == int64(c.Throughput) {
			close(all)
		}
		return nil
	})); err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	cl := asynq.NewClient(rco)
	defer cl.Close()
	mark()
	t0 := time.Now()
	if err := parallel(c.Throughput, func(i int) error {
		_, err := cl.EnqueueContext(ctx, asynq.NewTask(kind, payload(i)), asynq.Queue(q),
			asynq.TaskID(fmt.Sprintf("%s-%s-%d", kind, run, i)), asynq.Retention(time.Hour))
		return err
	}); err != nil {
		return 0, err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("only %d of %d %s tasks ran", n.Load(), c.Throughput, kind)
	}
	perSec := float64(c.Throughput) / time.Since(t0).Seconds()
	done()
	return perSec, nil
}

// naive runs the same number of bare Asynq tasks whose handler streams one instant turn from
// the simulator with agentclient, as the worker does, and nothing else: the integration lettaq
// replaces (a timeout and a resend), without journal, ordering, reply events or task result.
// Its figures put lettaq's own part apart from Letta's call.
func naive(ctx context.Context, c Config, rco asynq.RedisClientOpt, rdb *redis.Client, run, simURL string, simPID, redisPID int, r *Results) error {
	ac, err := agentclient.New(agentclient.Config{BaseURL: simURL, StreamTransport: c.StreamTransport})
	if err != nil {
		return err
	}
	defer ac.CloseIdleConnections()
	var failed atomic.Int64
	var rt0 time.Duration
	var cpu0 cpuMark
	r.NaivePerSec, err = bareTasks(ctx, c, rco, "naive", run,
		func(i int) []byte { return []byte(benchAgent(2, i%64)) },
		func(ctx context.Context, t *asynq.Task) {
			err := ac.SendStream(ctx, agentclient.SendRequest{AgentID: string(t.Payload()), Text: "hi", Otid: uuid.NewString()},
				agentclient.NewStreamState(), agentclient.StreamOptions{})
			if err != nil {
				failed.Add(1)
			}
		},
		func() { rt0, _ = redisServerTime(ctx, rdb); cpu0 = markCPU(simPID, redisPID) },
		func() {
			r.NaiveCPU = spentCPU(cpu0, markCPU(simPID, redisPID), c.Throughput)
			if rt1, err := redisServerTime(ctx, rdb); err == nil && rt0 > 0 {
				r.NaiveRedisTime = (rt1 - rt0) / time.Duration(c.Throughput)
			}
		})
	if err != nil {
		return err
	}
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("%d of %d naive streams failed", f, c.Throughput)
	}
	return nil
}

// parallel runs f(0..n-1) on 32 goroutines.
func parallel(n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// simStats is what the child simulator reports when its stdin closes.
type simStats struct {
	UserMessages   int `json:"user_messages"`
	DuplicateOtids int `json:"duplicate_otids"`
}

// serveSim is the child process: a simulator whose agents think for -think (0: answer at
// once), pinging every -ping. It prints its URL, then its stats when stdin closes.
func serveSim(args []string) {
	fs := flag.NewFlagSet("sim", flag.ExitOnError)
	think := fs.Duration("think", 30*time.Second, "")
	ping := fs.Duration("ping", time.Second, "")
	agents := fs.Int("agents", 1, "")
	cpuProfile := fs.String("cpuprofile", "", "")
	_ = fs.Parse(args)
	raiseFileLimit()
	sc := lettasim.ThinkingScript(*think, "done thinking")
	if *think <= 0 {
		sc = lettasim.QuickScript("ok")
	}
	sim := lettasim.NewServer(lettasim.Config{AutoCreateAgents: true, PingInterval: *ping, DefaultScript: sc})
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: simulator CPU profile:", err)
			os.Exit(1)
		}
		defer f.Close()
	}
	fmt.Println(sim.URL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	var st simStats
	seen := map[string]int{}
	for i := range *agents {
		for _, m := range sim.UserMessages(benchAgent(3, i)) {
			st.UserMessages++
			seen[m.Otid]++
		}
	}
	for _, n := range seen {
		if n > 1 {
			st.DuplicateOtids++
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(st)
	sim.Close()
}

func rss() (cur, peak uint64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			n, _ := strconv.ParseUint(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				cur = n << 10
			case "VmHWM:":
				peak = n << 10
			}
		}
	}
	return cur, peak
}

func concurrency(ctx context.Context, c Config, rco asynq.RedisClientOpt, run string, r *Results, log io.Writer) error {
	const agents = 100
	child, err := startSimChild(ctx, "-think", c.Think.String(), "-ping", c.Ping.String(), "-agents", strconv.Itoa(agents))
	if err != nil {
		return err
	}
	defer child.stop()
	simURL := child.url

	qname, prefix := "bench-conc-"+run, "lettaq-bench-"+run+":"
	cnt := newCounter(c.Concurrent)
	rc := &redisCounter{}
	client, stop, err := startQueue(ctx, c, countingOpt{rco, rc, true}, simURL, qname, prefix, c.Concurrent, cnt)
	if err != nil {
		return err
	}
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: rco.Addr, DB: rco.DB, Password: rco.Password})
	defer rdb.Close()
	time.Sleep(500 * time.Millisecond)
	mem0, memErr := measureRedisBytes(ctx, rdb, qname, prefix)
	runtime.GC()
	r.BaseRSS, _ = rss()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	baseG := runtime.NumGoroutine()
	r.Concurrent = c.Concurrent
	var peak atomic.Uint64
	measured, steadyWritten := false, false
	var measuredAt time.Time
	var allocAt uint64
	var tripsAt, cmdsAt int64
	sampling, samplerDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampling:
				return
			case <-t.C:
				cur, _ := rss()
				if cur > peak.Load() {
					peak.Store(cur)
				}
				if !measured && cnt.inFlight.Load() == int64(c.Concurrent) {
					measured = true
					// Every turn is in flight: what each one holds, in Redis (first:
					// the GC below collects what measuring allocates) and in the worker.
					if mem, err := measureRedisBytes(ctx, rdb, qname, prefix); err == nil && memErr == nil {
						r.ThinkRedisBytes = mem.per(mem0, c.Concurrent)
					}
					runtime.GC()
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					n := uint64(c.Concurrent)
					r.HeapPerTurn = sub(m.HeapAlloc, base.HeapAlloc) / n
					r.StackPerTurn = sub(m.StackInuse, base.StackInuse) / n
					r.GoroutinesPerTurn = float64(runtime.NumGoroutine()-baseG) / float64(n)
					if c.HeapProfile != "" {
						writeProfiles(c.HeapProfile, log)
					}
					measuredAt, allocAt = time.Now(), m.TotalAlloc
					tripsAt, cmdsAt = rc.snapshot()
					rc.trace.Store(c.TraceRedis)
				}
				// Redis per thinking turn: over half the think time (at most 30 s)
				// with every turn in flight.
				if measured && r.ThinkCmdsPerMin == 0 && time.Since(measuredAt) >= min(c.Think/2, 30*time.Second) && cnt.inFlight.Load() == int64(c.Concurrent) {
					trips, cmds := rc.snapshot()
					perMin := float64(c.Concurrent) * time.Since(measuredAt).Minutes()
					r.ThinkCmdsPerMin, r.ThinkTripsPerMin = float64(cmds-cmdsAt)/perMin, float64(trips-tripsAt)/perMin
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					r.StackPerTurnLate = sub(m.StackInuse, base.StackInuse) / uint64(c.Concurrent)
					rc.trace.Store(false)
					if c.TraceRedis {
						printTrace(log, "a thinking turn's (per minute)", rc.names(), perMin)
					}
				}
				if measured && r.AllocPerTurnSecond == 0 && time.Since(measuredAt) >= 5*time.Second && cnt.inFlight.Load() == int64(c.Concurrent) {
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					r.AllocPerTurnSecond = uint64(float64(m.TotalAlloc-allocAt) / float64(c.Concurrent) / time.Since(measuredAt).Seconds())
				}
				if measured && !steadyWritten && c.HeapProfile != "" && time.Since(measuredAt) >= min(c.Think/2, 20*time.Second) && cnt.inFlight.Load() == int64(c.Concurrent) {
					steadyWritten = true
					writeSteadyProfile(c.HeapProfile+".steady", time.Since(measuredAt), log)
				}
			}
		}
	}()
	t0 := time.Now()
	if err := parallel(c.Concurrent, func(i int) error {
		_, err := client.Enqueue(ctx, queue.Message{AgentID: benchAgent(3, i%agents), Text: "think about it",
			Conversation: record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("c-%s-%d", run, i)}})
		return err
	}); err != nil {
		close(sampling)
		<-samplerDone
		return err
	}
	fmt.Fprintf(log, "  enqueued %d in %.1fs\n", c.Concurrent, time.Since(t0).Seconds())
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
wait:
	for {
		select {
		case <-cnt.done:
			break wait
		case <-progress.C:
			cur, _ := rss()
			fmt.Fprintf(log, "  %.0fs: %d in flight (peak %d), %d answered, %d failed, RSS %.0f MB\n", time.Since(t0).Seconds(),
				cnt.inFlight.Load(), cnt.peak.Load(), cnt.answered.Load(), cnt.failed.Load(), float64(cur)/(1<<20))
		case <-time.After(c.Think + 10*time.Minute):
			break wait
		}
	}
	r.ConcurrentTime = time.Since(t0)
	close(sampling)
	<-samplerDone
	r.PeakRSS = peak.Load()
	r.PeakInFlight = cnt.peak.Load()
	r.Answered = cnt.answered.Load()
	r.Failed = cnt.failed.Load()
	if st, ok := child.stats(); ok {
		r.UserMessages, r.DuplicateOtids = st.UserMessages, st.DuplicateOtids
	}
	return nil
}

// simChild is a simulator in a child process (the benchmark's own binary,
// started with -serve-sim).
type simChild struct {
	url   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
}

func startSimChild(ctx context.Context, args ...string) (*simChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"-serve-sim"}, args...)...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	// The simulator is not what is measured: no memory limit of the worker's for it.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("simulator child printed no URL")
	}
	return &simChild{url: strings.TrimSpace(sc.Text()), cmd: cmd, stdin: stdin, out: sc}, nil
}

// stats closes the child's stdin and reads what it reports.
func (s *simChild) stats() (simStats, bool) {
	_ = s.stdin.Close()
	var st simStats
	if !s.out.Scan() {
		return st, false
	}
	return st, json.Unmarshal(s.out.Bytes(), &st) == nil
}

func (s *simChild) stop() { _ = s.cmd.Process.Kill(); _ = s.cmd.Wait() }

// gcSettings describes the GC's pacing: GOGC and the memory limit.
func gcSettings() string {
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		gogc = "100"
	}
	limit := "none"
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		limit = fmt.Sprintf("%d MiB", l>>20)
	}
	return "GOGC " + gogc + ", GOMEMLIMIT " + limit
}

// writeSteadyProfile writes a second heap profile while the turns only think:
// its alloc_space less the first profile's (go tool pprof -sample_index
// alloc_space -diff_base FILE FILE.steady) is what thinking turns allocate.
func writeSteadyProfile(path string, after time.Duration, log io.Writer) {
	runtime.GC() // publishes the allocations up to now
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(log, "  profile: %v\n", err)
		return
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintf(log, "  profile: %v\n", err)
	}
	_ = f.Close()
	fmt.Fprintf(log, "  wrote %s, %.0fs after the first\n", path, after.Seconds())
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// writeProfiles writes the heap profile (after a GC, so it shows what is
// live) and a goroutine profile beside it.
func writeProfiles(path string, log io.Writer) {
	runtime.GC()
	for _, p := range []struct{ name, file string }{{"heap", path}, {"goroutine", path + ".goroutine"}} {
		f, err := os.Create(p.file)
		if err != nil {
			fmt.Fprintf(log, "  profile: %v\n", err)
			return
		}
		if err := pprof.Lookup(p.name).WriteTo(f, 0); err != nil {
			fmt.Fprintf(log, "  profile: %v\n", err)
		}
		_ = f.Close()
	}
	fmt.Fprintf(log, "  wrote %s and %s.goroutine (%d goroutines)\n", path, path, runtime.NumGoroutine())
}

// printTrace writes the traced round trips, per unit (turns, or turn-minutes).
func printTrace(log io.Writer, what string, names []nameCount, per float64) {
	fmt.Fprintf(log, "  %s Redis round trips:\n", what)
	for _, n := range names {
		fmt.Fprintf(log, "    %6.2f  %s\n", float64(n.n)/per, n.name)
	}
}

// cleanup deletes what a run left in Redis: its queues (and their tasks),
// the journal and reply streams under its prefix, and the ordering and
// thread keys of its chats (whose ids carry the run id).
func cleanup(ctx context.Context, rdb *redis.Client, run string) error {
	patterns := []string{"lettaq-bench-" + run + ":*", "asynq:{bench-*-" + run + "}*", "lettaq:*" + run + "*"}
	for _, p := range patterns {
		iter := rdb.Scan(ctx, 0, p, 1000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 500 {
				if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
		}
	}
	var qs []any
	for _, k := range []string{"lat", "tp", "noop", "naive", "conc"} {
		qs = append(qs, "bench-"+k+"-"+run)
	}
	return rdb.SRem(ctx, "asynq:queues", qs...).Err()
}
