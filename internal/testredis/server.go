package testredis

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Persistent is a standalone redis-server of one test's own, on a free
// loopback port, with every write in an append-only file fsynced before it
// is acknowledged (--appendonly yes --appendfsync always, no RDB
// snapshots). It can be stopped and started again on the same port with
// the same data: a Redis restart, as a deploy or a host reboot makes it.
// The process is killed when the test ends.
type Persistent struct {
	// Addr is host:port; it stays the same across restarts.
	Addr string
	// Dir holds the append-only file (a t.TempDir()).
	Dir string

	server string
	port   int

	mu   sync.Mutex
	proc *node // nil while stopped
	last *node // the latest process, running or not (its output)
}

// persistentStopTimeout bounds how long Stop waits for redis-server to exit
// after SIGTERM.
const persistentStopTimeout = 10 * time.Second

// StartPersistent starts a persistent redis-server (see Persistent) and
// returns when it answers PING.
//
// Without redis-server on PATH the test is skipped, or fails when
// LETTAQ_REQUIRE_REDIS=1.
func StartPersistent(t testing.TB) *Persistent {
	t.Helper()
	p, err := StartPersistentIn(lookTool(t, "redis-server"), t.TempDir())
	if err != nil {
		t.Fatalf("testredis: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartPersistentIn starts a persistent redis-server (see Persistent), the
// binary server, with dir as its directory, outside a test (a command such
// as integration/chaos); Close ends it.
func StartPersistentIn(server, dir string) (*Persistent, error) {
	p := &Persistent{server: server, Dir: dir}
	var lastErr error
	for range 5 {
		// Another process may take the free port before redis-server binds
		// it: try another one. Restarts reuse the port that worked.
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p.port = port
		if lastErr = p.Start(); lastErr == nil {
			p.Addr = p.proc.addr
			return p, nil
		}
	}
	return nil, fmt.Errorf("persistent redis-server: %w", lastErr)
}

// Server returns the server as a *Server, for code that takes one (DB 0).
func (p *Persistent) Server() *Server { return &Server{Addr: p.Addr, Real: true} }

// Client returns a new go-redis client; it is closed when the test ends. It
// reconnects by itself after a restart.
func (p *Persistent) Client(t testing.TB) *redis.Client { return p.Server().Client(t) }

// Start starts redis-server on the server's port and directory (it loads
// the append-only file a Stop left) and returns when it answers PING. It
// fails when the server is running.
func (p *Persistent) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		return errors.New("testredis: redis-server is running already")
	}
	n, err := startNode(p.server, p.port, p.Dir,
		"--appendonly", "yes",
		"--appendfsync", "always",
		"--save", "",
	)
	if err != nil {
		return fmt.Errorf("redis-server on port %d: %w", p.port, err)
	}
	p.proc, p.last = n, n
	return nil
}

// Stop shuts redis-server down cleanly (SIGTERM: it finishes the
// append-only file and exits) and waits until the process is gone, so that
// nothing answers on Addr. It fails when the server was not running, or did
// not exit cleanly within 10s (then it is killed).
func (p *Persistent) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.proc
	if n == nil {
		return errors.New("testredis: redis-server is not running")
	}
	p.proc = nil
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		n.kill()
		return fmt.Errorf("testredis: SIGTERM redis-server %s: %w", n.addr, err)
	}
	select {
	case <-n.done:
	case <-time.After(persistentStopTimeout):
		n.kill()
		return fmt.Errorf("testredis: redis-server %s did not exit within %v of SIGTERM\n%s", n.addr, persistentStopTimeout, n.out.String())
	}
	if !n.cmd.ProcessState.Success() {
		return fmt.Errorf("testredis: redis-server %s exited with %s\n%s", n.addr, n.cmd.ProcessState, n.out.String())
	}
	return nil
}

// Restart is Stop then Start: same port, same data.
func (p *Persistent) Restart() error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.Start()
}

// Logs returns the output of the running (or last) redis-server, for a
// failure message.
func (p *Persistent) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return ""
	}
	return p.last.out.String()
}

// Close kills the process, whatever its state (StartPersistent calls it
// when the test ends).
func (p *Persistent) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		p.proc.kill()
		p.proc = nil
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("no free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
