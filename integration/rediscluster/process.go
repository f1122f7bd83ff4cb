package rediscluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// process is one redis-server of the cluster. It runs in a process group
// of its own, so that killing it also ends a child it forked (a diskless
// replication transfer).
type process struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed when the process has exited
}

// startProcess starts redis-server on a free loopback port whose cluster bus
// port (+10000) is free too, with dir as its directory, and returns once it
// answers PING. It retries on other ports when the one picked was taken
// meanwhile.
func startProcess(server, dir string, args []string) (*process, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := freePortPair()
		if err != nil {
			return nil, err
		}
		p := &process{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir,
			out: &lockedBuffer{}, done: make(chan struct{})}
		p.cmd = exec.Command(server, append([]string{
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--daemonize", "no",
		}, args...)...)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		p.cmd.SysProcAttr = procAttr()
		if err := p.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", server, err)
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		if lastErr = p.waitPing(); lastErr == nil {
			return p, nil
		}
		p.kill()
		lastErr = fmt.Errorf("%w\n%s", lastErr, p.out.String())
		// A fresh nodes.conf for the next try: the old one names the old port.
		_ = os.Remove(dir + "/nodes.conf")
	}
	return nil, lastErr
}

// freePortPair returns a loopback port that is free, and whose cluster bus
// port (port+10000) is free too.
func freePortPair() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			_ = l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port pair (port, port+10000)")
}

// waitPing polls the process until it answers PING, exits, or the start
// timeout passes.
func (p *process) waitPing() error {
	rc := redis.NewClient(&redis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	return poll(context.Background(), startTimeout, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("redis-server on %s exited: %s", p.addr, p.cmd.ProcessState)
		}
		return rc.Ping(ctx).Err() == nil, nil
	})
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL to the process's group and waits until the process is
// gone. It may be called more than once.
func (p *process) kill() {
	if !p.exited() {
		killGroup(p.cmd.Process.Pid)
	}
	<-p.done
}

// poll calls f every 20ms (each call bounded by a second) until it reports
// done or an error, timeout passes, or ctx ends.
func poll(ctx context.Context, timeout time.Duration, f func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		done, err := f(cctx)
		cancel()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
