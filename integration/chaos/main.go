// Command chaos runs lettaq under faults and prints one table: N worker
// processes (this binary, re-executed as a worker wired as cmd/worker wires
// one), a redis-server of its own with an append-only file on a free
// loopback port, the Letta simulator in-process with slow turns and stream
// faults (stalls, dropped connections, refused resumes, tool calls), and M
// chats × K numbered messages enqueued through queue.Client. While they run
// it SIGKILLs and SIGTERMs the busiest worker (starting a replacement) and
// restarts Redis on a schedule; then it waits for every turn and reports
// enqueued, answered, failed (with causes), lost (no final event and no
// journal outcome), user messages per otid at the simulator, order
// violations per chat, the kills done, the Redis restarts, the takeover
// time after a SIGKILL (to the next attempt of the killed worker's running
// turns: Asynq's lease recovery, 60-120 s today), and each worker's peak
// RSS.
//
// Run it with:
//
//	go run ./integration/chaos                         # the default run, under 3 minutes
//	go run ./integration/chaos -workers 4 -chats 20 -messages 6 -schedule kill@5s,kill@20s,redis@30s -seed 7
//
// It exits 1 when a turn was lost, reached the agent twice or out of order,
// 2 when the run could not be made (no redis-server on PATH, a bad flag).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	if os.Getenv(envChild) == "1" {
		os.Exit(childWorker())
	}
	os.Exit(runMain(os.Args[1:]))
}

func runMain(args []string) int {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes (N)")
	fs.IntVar(&cfg.Chats, "chats", cfg.Chats, "chats (M)")
	fs.IntVar(&cfg.Messages, "messages", cfg.Messages, "numbered messages per chat (K)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "the window in which the messages are enqueued")
	schedule := fs.String("schedule", FormatSchedule(cfg.Schedule), "what happens when: kill (SIGKILL the busiest worker), term (SIGTERM it), redis (restart Redis), each @ a time from the start")
	fs.DurationVar(&cfg.Outage, "outage", cfg.Outage, "how long Redis stays down per restart")
	fs.DurationVar(&cfg.Wait, "wait", cfg.Wait, "how long to wait, after the window and the schedule, for every turn to end")
	fs.DurationVar(&cfg.Settle, "settle", cfg.Settle, "how long to wait then for the queue to settle")
	fs.DurationVar(&cfg.TakeoverAfter, "takeover-after", cfg.TakeoverAfter, "the workers' LETTAQ_TAKEOVER_AFTER (0: off, a killed worker's turns wait for Asynq's recovery)")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the turns' timing and faults")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for Redis's data and the workers' logs, kept (default: a new temporary one, removed when the run passes)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.Schedule, err = ParseSchedule(*schedule); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: -schedule:", err)
		return 2
	}
	if cfg.Workers < 1 || cfg.Chats < 1 || cfg.Messages < 1 {
		fmt.Fprintln(os.Stderr, "chaos: -workers, -chats and -messages must be at least 1")
		return 2
	}
	if cfg.RedisServer, err = exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: redis-server is not on PATH: the run needs a Redis of its own to restart:", err)
		return 2
	}
	// go-redis reports each failed dial of the run's own client (Redis is
	// down on purpose): say whose lines they are.
	redis.SetLogger(clientLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ownDir := cfg.Dir == ""
	if ownDir {
		if cfg.Dir, err = os.MkdirTemp("", "lettaq-chaos-"); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
	}
	rep, err := Run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v (logs in %s)\n", err, cfg.Dir)
		return 2
	}
	fmt.Print(rep.Table())
	if f := rep.Failures(); len(f) > 0 {
		for _, s := range f {
			fmt.Fprintln(os.Stderr, "chaos: FAIL:", s)
		}
		fmt.Fprintf(os.Stderr, "chaos: the workers' logs and Redis's data are in %s\n", cfg.Dir)
		return 1
	}
	if ownDir {
		_ = os.RemoveAll(cfg.Dir) // a run that passed leaves nothing behind
	}
	return 0
}

// clientLog writes go-redis's log lines to stderr, marked as the run's
// client's.
type clientLog struct{}

func (clientLog) Printf(_ context.Context, format string, v ...any) {
	fmt.Fprintf(os.Stderr, "chaos: redis client: "+format+"\n", v...)
}
