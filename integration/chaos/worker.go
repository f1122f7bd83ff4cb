package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lettaq/lettaq/internal/app"
)

// The chaos command runs its workers as child processes of its own binary:
// with LETTAQ_CHAOS_WORKER=1 it is a worker wired as cmd/worker wires one
// (app.StartWorker), configured from these variables, with the run's budget.
const (
	envChild  = "LETTAQ_CHAOS_WORKER"
	envRedis  = "LETTAQ_CHAOS_REDIS_ADDR"
	envPrefix = "LETTAQ_CHAOS_PREFIX"
	envQueue  = "LETTAQ_CHAOS_QUEUE"
	envLetta  = "LETTAQ_CHAOS_LETTA_URL"
	envID     = "LETTAQ_CHAOS_WORKER_ID"
	// envTakeover is the worker's LETTAQ_TAKEOVER_AFTER (Config.TakeoverAfter).
	envTakeover = "LETTAQ_CHAOS_TAKEOVER_AFTER"
)

// childWorker runs a worker until SIGTERM (graceful) or SIGKILL, and
// returns the exit code.
func childWorker() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", os.Getenv(envID))
	vars := map[string]string{
		"REDIS_URL":                  "redis://" + os.Getenv(envRedis) + "/0",
		"LETTAQ_KEY_PREFIX":          os.Getenv(envPrefix),
		"LETTAQ_QUEUES":              os.Getenv(envQueue),
		"LETTA_BASE_URL":             os.Getenv(envLetta),
		"LETTAQ_WORKER_ID":           os.Getenv(envID),
		"LETTAQ_HTTP_ADDR":           "127.0.0.1:0",
		"LETTAQ_HTTP_TOKEN":          "chaos-token",
		"LETTAQ_CONCURRENCY":         "50",
		"LETTAQ_TASK_CHECK_INTERVAL": "50ms",
		"LETTAQ_HEARTBEAT_INTERVAL":  "200ms",
		"LETTAQ_SHUTDOWN_TIMEOUT":    "2s",
		"LETTAQ_TAKEOVER_AFTER":      os.Getenv(envTakeover),
	}
	cfg, err := app.ParseWorkerSettings(nil, func(k string) string { return vars[k] }, io.Discard)
	if err != nil {
		log.Error("worker config", "error", err)
		return 2
	}
	cfg.Budget = chaosBudget()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	r, err := app.StartWorker(ctx, cfg, log, io.Discard)
	if err != nil {
		log.Error("start worker", "error", err)
		return 2
	}
	fmt.Println("READY")
	<-r.Done()
	if err := r.Err(); err != nil {
		log.Error("worker", "error", err)
		return 1
	}
	log.Info("worker exited cleanly")
	return 0
}

// workerProc is a worker child process, seen from the run.
type workerProc struct {
	id      string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	peak    atomic.Int64  // VmHWM, sampled while it runs
	fate    atomic.Value  // string: how it ended, set by the run
}

// workerStartTimeout bounds a worker's start (a loaded machine is slow).
const workerStartTimeout = 60 * time.Second

// startWorker starts the binary bin as worker id, its log in logDir, and
// returns once it printed READY.
func startWorker(bin string, env []string, id, logDir string) (*workerProc, error) {
	logPath := logDir + "/worker-" + id + ".log"
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), env...), envChild+"=1", envID+"="+id)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	p := &workerProc{id: id, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	p.fate.Store("to the end")
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "READY" {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	go p.sampleRSS()
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("worker %s exited at start (%s): see %s", id, cmd.ProcessState, logPath)
	case <-time.After(workerStartTimeout):
		p.signal(syscall.SIGKILL)
		<-p.done
		return nil, fmt.Errorf("worker %s not ready within %v: see %s", id, workerStartTimeout, logPath)
	}
}

// sampleRSS keeps the process's peak RSS until it exits.
func (p *workerProc) sampleRSS() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if n, err := PeakRSS(p.cmd.Process.Pid); err == nil {
			p.peak.Store(max(p.peak.Load(), n))
		}
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
	}
}

func (p *workerProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *workerProc) signal(sig syscall.Signal) {
	if p.alive() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop SIGTERMs the worker and waits for it; SIGKILL after grace.
func (p *workerProc) stop(ctx context.Context, grace time.Duration) error {
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	case <-ctx.Done():
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	return errors.New("worker " + p.id + " did not exit within " + grace.String() + " of SIGTERM")
}
