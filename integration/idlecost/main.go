// Command idlecost measures what Asynq queues cost Redis while nothing is
// enqueued: the commands a second each idle asynq.Server sends, for a number
// of queues of equal weight, read as the delta of INFO commandstats over a
// time window (commands a script runs count as well as the EVALSHA that ran
// it) and, on the client side, as round trips.
//
// Run it with:
//
//	go run ./integration/idlecost                          # its own redis-server; 1, 16, 64 queues; 1 and 3 servers; 10s each
//	go run ./integration/idlecost -check 1s -delayed 5s    # Asynq's own defaults instead of a lettaq worker's
//	go run ./integration/idlecost -redis 127.0.0.1:6380    # a Redis nothing else uses
//
// By default it starts a redis-server of its own (on PATH) on a free
// loopback port and kills it at the end: a Redis other clients use would
// count their commands too. The servers are configured as a lettaq worker
// configures Asynq by default (TaskCheckInterval 100ms, DelayedTaskCheckInterval
// 1s; -check and -delayed change them). Which of Asynq's loops sends what
// is in loops.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/rediscluster"
)

func main() {
	var (
		addr        = flag.String("redis", "", "host:port of a Redis nothing else uses (default: start a redis-server of its own)")
		queuesFlag  = flag.String("queues", "1,16,64", "numbers of queues to measure, comma-separated")
		workersFlag = flag.String("workers", "1,3", "numbers of idle asynq.Servers to measure, comma-separated")
		window      = flag.Duration("for", 10*time.Second, "how long each case is measured")
		warmup      = flag.Duration("warmup", 2*time.Second, "how long the servers run before the window opens")
		check       = flag.Duration("check", 100*time.Millisecond, "TaskCheckInterval (a lettaq worker's default; Asynq's is 1s)")
		delayed     = flag.Duration("delayed", time.Second, "DelayedTaskCheckInterval (a lettaq worker's default; Asynq's is 5s)")
		concurrency = flag.Int("concurrency", 10, "each server's Concurrency")
		verbose     = flag.Bool("v", false, "print each case's commands by name too")
	)
	flag.Parse()
	queues, err := ints(*queuesFlag)
	if err != nil {
		fatalf("-queues: %v", err)
	}
	workers, err := ints(*workersFlag)
	if err != nil {
		fatalf("-workers: %v", err)
	}
	if *addr == "" {
		srv, err := startRedis()
		if err != nil {
			fatalf("%v", err)
		}
		defer srv.stop()
		*addr = srv.addr
	}

	cfg := asynq.Config{Concurrency: *concurrency, TaskCheckInterval: *check, DelayedTaskCheckInterval: *delayed,
		Logger: discard{}, LogLevel: asynq.ErrorLevel}
	fmt.Printf("idle asynq.Servers (Asynq %s), TaskCheckInterval %v, DelayedTaskCheckInterval %v, each case %v after %v of warm-up, Redis %s\n\n",
		asynqVersion(), *check, *delayed, *window, *warmup, *addr)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queues\tservers\tcommands/s per server\t(predicted)\tscripts/s per server\tround trips/s per server\t(predicted)\tcommands/s in all\t")
	var details []string
	for _, nq := range queues {
		for _, nw := range workers {
			r, err := measure(*addr, cfg, nq, nw, *warmup, *window)
			if err != nil {
				fatalf("%d queues, %d servers: %v", nq, nw, err)
			}
			per := func(n int64) string { return strconv.FormatFloat(float64(n)/r.secs/float64(nw), 'f', 1, 64) }
			pc, pt := predict(cfg, nq)
			fmt.Fprintf(tw, "%d\t%d\t%s\t%.1f\t%s\t%s\t%.1f\t%.1f\t\n", nq, nw, per(r.commands()), pc, per(r.scripts()),
				per(r.trips), pt, float64(r.commands())/r.secs)
			if *verbose {
				details = append(details, fmt.Sprintf("%d queues, %d servers, per server a second: %s", nq, nw, r.byName(nw)))
			}
		}
	}
	_ = tw.Flush()
	for _, d := range details {
		fmt.Println("\n" + d)
	}
}

// result is one case's window.
type result struct {
	secs  float64
	calls map[string]int64 // INFO commandstats' delta by command
	trips int64            // round trips the servers' clients sent
}

// ours are the commands idlecost itself sends during a window.
var ours = map[string]bool{"info": true}

func (r result) commands() int64 {
	var n int64
	for name, c := range r.calls {
		if !ours[name] {
			n += c
		}
	}
	return n
}

func (r result) scripts() int64 { return r.calls["evalsha"] + r.calls["eval"] }

func (r result) byName(servers int) string {
	var names []string
	for n, c := range r.calls {
		if !ours[n] && c > 0 {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return r.calls[names[i]] > r.calls[names[j]] })
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", n, float64(r.calls[n])/r.secs/float64(servers)))
	}
	return strings.Join(parts, ", ")
}

// measure runs servers idle asynq.Servers on nq queues of equal weight and
// returns what they sent during window, after warmup.
func measure(addr string, cfg asynq.Config, nq, servers int, warmup, window time.Duration) (result, error) {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	run := fmt.Sprintf("idlecost-%d-", time.Now().UnixNano())
	cfg.Queues = map[string]int{}
	for i := range nq {
		cfg.Queues[run+strconv.Itoa(i)] = 1
	}
	count := &tripCounter{}
	var running []*asynq.Server
	var clients []*redis.Client
	defer func() {
		for _, s := range running {
			s.Shutdown()
		}
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for range servers {
		rc := redis.NewClient(&redis.Options{Addr: addr})
		rc.AddHook(count)
		clients = append(clients, rc)
		s := asynq.NewServerFromRedisClient(rc, cfg)
		if err := s.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err != nil {
			return result{}, err
		}
		running = append(running, s)
	}
	time.Sleep(warmup)
	before, err := commandStats(ctx, admin)
	if err != nil {
		return result{}, err
	}
	trips0, t0 := count.n.Load(), time.Now()
	time.Sleep(window)
	after, err := commandStats(ctx, admin)
	if err != nil {
		return result{}, err
	}
	r := result{secs: time.Since(t0).Seconds(), trips: count.n.Load() - trips0, calls: map[string]int64{}}
	for n, c := range after {
		r.calls[n] = c - before[n]
	}
	return r, nil
}

func commandStats(ctx context.Context, rc *redis.Client) (map[string]int64, error) {
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	calls, err := rediscluster.ParseCommandStats(info)
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return calls, nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// asynqVersion is the Asynq module's version this binary was built with.
func asynqVersion() string {
	if v := buildVersion("github.com/hibiken/asynq"); v != "" {
		return v
	}
	return "(unknown)"
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "idlecost: "+format+"\n", args...)
	os.Exit(1)
}

type discard struct{}

func (discard) Debug(...any) {}
func (discard) Info(...any)  {}
func (discard) Warn(...any)  {}
func (discard) Error(...any) {}
func (discard) Fatal(...any) {}
