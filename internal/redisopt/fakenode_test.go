package redisopt

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeNode is a one-node "cluster" on a loopback port, speaking just
// enough RESP2 for a go-redis ClusterClient: it serves every slot (or
// says another address does), and runs INCR and MULTI … INCR … EXEC on
// its own counters. What it does with each write (an INCR, or a MULTI
// with what it queues) is its plan's: run it, refuse it with CLUSTERDOWN,
// or run it and close the connection before the reply (a reply lost).
type fakeNode struct {
	t    *testing.T
	ln   net.Listener
	plan func(n int) fakeAction // n: the write's number, from 1
	// slotsAt is the address CLUSTER SLOTS names as serving every slot
	// (the node's own when empty).
	slotsAt string

	mu     sync.Mutex
	writes int
	vals   map[string]int
}

type fakeAction int

const (
	fakeRun fakeAction = iota
	fakeClusterDown
	fakeRunAndDrop
)

// startFakeNode listens on addr ("127.0.0.1:0" for any port) and serves
// until the test ends; slotsAt is what CLUSTER SLOTS names as serving
// every slot ("": the node itself).
func startFakeNode(t *testing.T, addr, slotsAt string, plan func(n int) fakeAction) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{t: t, ln: ln, plan: plan, slotsAt: slotsAt, vals: map[string]int{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { f.serve(c) })
		}
	})
	return f
}

func (f *fakeNode) Addr() string { return f.ln.Addr().String() }

// Writes is how many writes the node was sent; Val is a counter's value
// (how many INCRs of it ran).
func (f *fakeNode) Writes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func (f *fakeNode) Val(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vals[key]
}

// next takes the action for the next write.
func (f *fakeNode) next() fakeAction {
	f.mu.Lock()
	f.writes++
	n := f.writes
	f.mu.Unlock()
	return f.plan(n)
}

func (f *fakeNode) incr(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vals[key]++
	return f.vals[key]
}

const clusterDownReply = "-CLUSTERDOWN The cluster is down\r\n"

func (f *fakeNode) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	var tx []string // keys queued in a MULTI
	var txAction *fakeAction
	for {
		args, err := readCommand(r)
		if err != nil {
			return
		}
		var reply string
		switch name := strings.ToUpper(args[0]); {
		case name == "HELLO":
			reply = "-ERR unknown command 'HELLO'\r\n" // go-redis falls back to RESP2
		case name == "CLIENT":
			reply = "+OK\r\n"
		case name == "COMMAND":
			reply = "*0\r\n"
		case name == "PING":
			reply = "+PONG\r\n"
		case name == "CLUSTER" && len(args) > 1 && strings.EqualFold(args[1], "SLOTS"):
			at := f.slotsAt
			if at == "" {
				at = f.Addr()
			}
			host, port, _ := net.SplitHostPort(at)
			reply = fmt.Sprintf("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%d\r\n%s\r\n:%s\r\n", len(host), host, port)
		case name == "MULTI":
			a := f.next()
			tx, txAction = []string{}, &a
			reply = "+OK\r\n"
		case name == "INCR" && txAction != nil:
			if *txAction == fakeClusterDown {
				reply = clusterDownReply // not queued: EXEC aborts
			} else {
				tx = append(tx, args[1])
				reply = "+QUEUED\r\n"
			}
		case name == "EXEC" && txAction != nil:
			a := *txAction
			txAction = nil
			if a == fakeClusterDown {
				reply = "-EXECABORT Transaction discarded because of previous errors.\r\n"
				break
			}
			reply = fmt.Sprintf("*%d\r\n", len(tx))
			for _, k := range tx {
				reply += fmt.Sprintf(":%d\r\n", f.incr(k))
			}
			if a == fakeRunAndDrop {
				return
			}
		case name == "INCR":
			switch f.next() {
			case fakeClusterDown:
				reply = clusterDownReply
			case fakeRunAndDrop:
				f.incr(args[1])
				return
			default:
				reply = fmt.Sprintf(":%d\r\n", f.incr(args[1]))
			}
		default:
			reply = fmt.Sprintf("-ERR fake node: unknown command '%s'\r\n", args[0])
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
	}
}

// readCommand reads one command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array: %q", line)
	}
	args := make([]string, n)
	for i := range args {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return nil, fmt.Errorf("bad bulk: %q", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}
