// Package faultproxy is a TCP proxy in front of a Redis for tests, in the
// manner of net/http/httptest: a real listener on loopback with an Addr and
// a Close, which forwards every connection to the Redis behind it and
// injects the faults a test arms, at the command the test names:
//
//   - DropReply: the command is forwarded and Redis runs it, its reply is
//     read and thrown away, and the client's connection is closed: the
//     client cannot tell whether its command ran (go-redis, with its
//     default MaxRetries, sends the command or the whole pipeline again).
//   - CutBefore: the client's connection is closed before the command is
//     forwarded: in a pipeline the commands before it ran, it and those
//     after it did not (a connection closed mid-pipeline).
//   - Delay: the command is held that long before it is forwarded.
//
// Each fault fires once, at the first command that matches it on any
// connection; Fired tells when it did. The proxy reads the client's
// commands (RESP arrays of bulk strings) and Redis's replies (RESP2 and
// RESP3) to pair each reply with its command.
package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Match reports whether a command (its arguments, the name first) is the
// one a fault is for.
type Match func(args []string) bool

// Command matches a command by its name (any case) and, when given, by
// substrings that some argument after the name must each contain (an
// EVALSHA's script is matched by a key it names, e.g.).
func Command(name string, contains ...string) Match {
	return func(args []string) bool {
		if len(args) == 0 || !strings.EqualFold(args[0], name) {
			return false
		}
		for _, s := range contains {
			found := false
			for _, a := range args[1:] {
				if strings.Contains(a, s) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	}
}

// Any matches a command that any of ms matches.
func Any(ms ...Match) Match {
	return func(args []string) bool {
		for _, m := range ms {
			if m(args) {
				return true
			}
		}
		return false
	}
}

type kind int

const (
	dropReply kind = iota
	cutBefore
	delay
)

// Fault is an armed fault; it fires once.
type Fault struct {
	kind  kind
	match Match
	delay time.Duration
	fired chan struct{}
	// Args is the command it fired at (read it after Fired).
	Args []string
}

// Fired is closed once the fault fired (for DropReply: once the reply was
// dropped and the connection closed).
func (f *Fault) Fired() <-chan struct{} { return f.fired }

// Done reports whether the fault fired.
func (f *Fault) Done() bool {
	select {
	case <-f.fired:
		return true
	default:
		return false
	}
}

// Proxy forwards connections on Addr to a Redis.
type Proxy struct {
	// Addr is the proxy's host:port on 127.0.0.1.
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	faults []*Fault
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start starts a proxy in front of the Redis at target (host:port), closed
// when the test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := New(target)
	if err != nil {
		tb.Fatalf("faultproxy: %v", err)
	}
	tb.Cleanup(p.Close)
	return p
}

// New starts a proxy in front of the Redis at target; Close stops it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL is redis://Addr/db.
func (p *Proxy) URL(db int) string { return fmt.Sprintf("redis://%s/%d", p.Addr, db) }

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// DropReply arms a fault: the next command that m matches runs at Redis,
// its reply is dropped and the client's connection closed.
func (p *Proxy) DropReply(m Match) *Fault { return p.arm(&Fault{kind: dropReply, match: m}) }

// CutBefore arms a fault: the client's connection is closed just before
// the next command that m matches is forwarded (the commands before it ran).
func (p *Proxy) CutBefore(m Match) *Fault { return p.arm(&Fault{kind: cutBefore, match: m}) }

// Delay arms a fault: the next command that m matches is held for d before
// it is forwarded (the commands behind it on its connection wait too).
func (p *Proxy) Delay(m Match, d time.Duration) *Fault {
	return p.arm(&Fault{kind: delay, match: m, delay: d})
}

func (p *Proxy) arm(f *Fault) *Fault {
	f.fired = make(chan struct{})
	p.mu.Lock()
	p.faults = append(p.faults, f)
	p.mu.Unlock()
	return f
}

// take returns the armed fault that args match, disarmed, or nil.
func (p *Proxy) take(args []string) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if f.match(args) {
			p.faults = append(p.faults[:i], p.faults[i+1:]...)
			f.Args = args
			return f
		}
	}
	return nil
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// pending is a forwarded command whose reply has not come back yet.
type pending struct {
	drop *Fault // drop its reply, then close
}

// session is one client connection and its connection to Redis.
type session struct {
	p         *Proxy
	client    net.Conn
	up        net.Conn
	mu        sync.Mutex
	cond      *sync.Cond
	queue     []pending
	closeOnce sync.Once
}

func (s *session) close() {
	s.closeOnce.Do(func() {
		s.p.untrack(s.client)
		s.p.untrack(s.up)
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.untrack(client)
		return
	}
	if !p.track(up) {
		p.untrack(client)
		return
	}
	s := &session{p: p, client: client, up: up}
	s.cond = sync.NewCond(&s.mu)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		s.replies()
	}()
	s.commands()
}

// commands forwards the client's commands to Redis, one at a time, firing
// the faults they match.
func (s *session) commands() {
	defer s.close()
	rd := bufio.NewReader(s.client)
	for {
		raw, args, err := readCommand(rd)
		if err != nil {
			return
		}
		f := s.p.take(args)
		pd := pending{}
		if f != nil {
			switch f.kind {
			case cutBefore:
				s.close()
				close(f.fired)
				return
			case delay:
				time.Sleep(f.delay)
				close(f.fired)
			case dropReply:
				pd.drop = f
			}
		}
		s.mu.Lock()
		s.queue = append(s.queue, pd)
		s.cond.Broadcast()
		s.mu.Unlock()
		if _, err := s.up.Write(raw); err != nil {
			return
		}
	}
}

// replies forwards Redis's replies to the client, each paired with its
// command; a dropped reply closes both connections.
func (s *session) replies() {
	defer s.close()
	rd := bufio.NewReader(s.up)
	for {
		raw, push, err := readReply(rd)
		if err != nil {
			return
		}
		if !push {
			s.mu.Lock()
			for len(s.queue) == 0 {
				s.cond.Wait()
			}
			pd := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			if pd.drop != nil {
				s.close()
				close(pd.drop.fired)
				return
			}
		}
		if _, err := s.client.Write(raw); err != nil {
			return
		}
	}
}

var errProtocol = errors.New("faultproxy: RESP protocol error")

// readLine reads one CRLF-terminated line, appending it to raw.
func readLine(rd *bufio.Reader, raw *bytes.Buffer) ([]byte, error) {
	line, err := rd.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	raw.Write(line)
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errProtocol
	}
	return line[:len(line)-2], nil
}

// readCommand reads a client's command: an array of bulk strings (or an
// inline command), raw as it came and its arguments.
func readCommand(rd *bufio.Reader) (raw []byte, args []string, err error) {
	var b bytes.Buffer
	line, err := readLine(rd, &b)
	if err != nil {
		return nil, nil, err
	}
	if len(line) == 0 || line[0] != '*' {
		return b.Bytes(), strings.Fields(string(line)), nil // inline
	}
	n, err := strconv.Atoi(string(line[1:]))
	if err != nil {
		return nil, nil, errProtocol
	}
	for range n {
		hdr, err := readLine(rd, &b)
		if err != nil {
			return nil, nil, err
		}
		if len(hdr) == 0 || hdr[0] != '$' {
			return nil, nil, errProtocol
		}
		size, err := strconv.Atoi(string(hdr[1:]))
		if err != nil || size < 0 {
			return nil, nil, errProtocol
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return nil, nil, err
		}
		b.Write(buf)
		args = append(args, string(buf[:size]))
	}
	return b.Bytes(), args, nil
}

// readReply reads one reply of Redis (RESP2 or RESP3); push reports an
// out-of-band push message (RESP3 '>'), which answers no command.
func readReply(rd *bufio.Reader) (raw []byte, push bool, err error) {
	var b bytes.Buffer
	first, err := rd.Peek(1)
	if err != nil {
		return nil, false, err
	}
	push = first[0] == '>'
	if err := readValue(rd, &b); err != nil {
		return nil, false, err
	}
	return b.Bytes(), push, nil
}

// readValue reads one RESP value into raw.
func readValue(rd *bufio.Reader, raw *bytes.Buffer) error {
	line, err := readLine(rd, raw)
	if err != nil {
		return err
	}
	if len(line) == 0 {
		return errProtocol
	}
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return nil
	case '$', '!', '=':
		size, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return errProtocol
		}
		if size < 0 {
			return nil // a RESP2 null
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return err
		}
		raw.Write(buf)
		return nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return errProtocol
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if err := readValue(rd, raw); err != nil {
				return err
			}
		}
		if line[0] == '|' { // attributes come before the value they describe
			return readValue(rd, raw)
		}
		return nil
	}
	return errProtocol
}
