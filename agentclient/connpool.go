package agentclient

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// idleReuse is how long a dedicated stream's connection may wait idle for
// the next stream. Servers close idle keep-alive connections on a timer of
// their own: uvicorn (which Letta runs under) and Node's http server after
// 5 s, nginx after 75 s. The server's timer starts when it has written the
// response, ours later (when its last byte was read), so 2 s keeps a
// margin of 3 s for the bytes in flight and for timers firing late: a
// connection is never offered a request at the moment a server of that
// kind gives up on it. (Each is also checked when it is taken, see peek;
// the margin is for the race that check cannot see.)
const idleReuse = 2 * time.Second

// drainWait bounds the waits for the end of a stream's response (its last
// chunk, which a server writes once its handler has returned, right after
// the last event): for bytes peek says are there (a TLS record arriving in
// pieces), and, when the next stream takes the connection within
// drainWait of the last event, for the end that has not arrived yet. A
// server that ends its responses so late has its connections closed, not
// reused, and costs a wait only to a stream that follows another at once.
const drainWait = 20 * time.Millisecond

// maxDrain bounds the bytes read after a stream's last event to reach the
// end of its response; a connection that needs more is closed instead.
const maxDrain = 64 << 10

type peekResult uint8

const (
	peekNone peekResult = iota // open, nothing to read
	peekData                   // bytes to read
	peekGone                   // closed or reset by the server, or not checkable
)

// idleConn is a connection whose last response was read (or is still
// being finished, see finish) and which may carry the next stream's
// request.
type idleConn struct {
	conn  net.Conn    // what streams read: the TCP connection, or a *tls.Conn over it
	raw   net.Conn    // the TCP connection, for peek
	dec   bodyDecoder // the last response's framing: its end may still be to come
	carry []byte      // raw bytes of the last response not decoded yet (a chunk line's start)
	since time.Time   // idle since
}

// connPool keeps the connections of cleanly finished dedicated streams for
// the next streams to the same server, as net/http's Transport keeps its
// idle connections: at most max of them (the transport's
// MaxIdleConnsPerHost), the most recently used first, each for at most
// idleReuse. It runs no goroutine per connection: an idle connection is
// checked (peek) when it is taken, and a timer closes the ones that waited
// too long. One pool serves one client, so one scheme and host.
type connPool struct {
	max int

	mu    sync.Mutex
	idle  []*idleConn // oldest first
	timer *time.Timer // closes expired connections; nil when idle is empty
}

func newConnPool(t *http.Transport) *connPool {
	if !canPeek || t.DisableKeepAlives {
		return nil
	}
	n := t.MaxIdleConnsPerHost
	if n == 0 {
		n = http.DefaultMaxIdleConnsPerHost
	}
	if n < 0 {
		return nil
	}
	return &connPool{max: n}
}

// put offers a connection for reuse: conn's response was read to its last
// event with no error, dec and carry are where its body decoding stopped.
// It reports whether the pool took the connection (if not, the caller
// closes it). A connection is kept only if the response's end (its last
// chunk and trailer, or its Content-Length) comes with no byte after it:
// what was already read is checked now, what is still on its way when
// the connection is taken (finish).
func (p *connPool) put(conn net.Conn, dec bodyDecoder, carry []byte) bool {
	if p == nil || dec.framing == framingNone || dec.bad || dec.extra {
		return false
	}
	ic := &idleConn{conn: conn, raw: conn, dec: dec}
	if tc, ok := conn.(*tls.Conn); ok {
		ic.raw = tc.NetConn()
	}
	if len(carry) > 0 {
		ic.carry = append([]byte(nil), carry...)
	}
	if !ic.finish(time.Time{}) {
		return false
	}
	ic.since = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) >= p.max {
		return false
	}
	p.idle = append(p.idle, ic)
	if p.timer == nil {
		p.timer = time.AfterFunc(idleReuse, p.expire)
	}
	return true
}

// get takes the most recently used connection that is still good: idle
// for less than idleReuse, its last response read to its end, nothing
// else to read, not closed by the server. Those that are not are closed.
// It returns nil when there is none (the caller dials).
func (p *connPool) get() net.Conn {
	if p == nil {
		return nil
	}
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		ic := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if time.Since(ic.since) < idleReuse && ic.finish(ic.since.Add(drainWait)) && ic.dec.end && ic.quiet() {
			return ic.conn
		}
		_ = ic.conn.Close()
	}
}

// expire closes the connections idle for idleReuse or more.
func (p *connPool) expire() {
	p.mu.Lock()
	var old []*idleConn
	now := time.Now()
	i := 0
	for i < len(p.idle) && now.Sub(p.idle[i].since) >= idleReuse {
		i++
	}
	old = append(old, p.idle[:i]...)
	clear(p.idle[:i])
	p.idle = p.idle[i:]
	if len(p.idle) == 0 {
		p.idle, p.timer = nil, nil
	} else {
		p.timer.Reset(idleReuse - now.Sub(p.idle[0].since))
	}
	p.mu.Unlock()
	for _, ic := range old {
		_ = ic.conn.Close()
	}
}

// closeIdle closes every idle connection.
func (p *connPool) closeIdle() {
	if p == nil {
		return
	}
	p.mu.Lock()
	old := p.idle
	p.idle = nil
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.mu.Unlock()
	for _, ic := range old {
		_ = ic.conn.Close()
	}
}

// len reports the number of idle connections.
func (p *connPool) len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

var errNotReusable = errors.New("connection not reusable")

// drainBufs hold what finish reads: the end of a response, a few bytes.
var drainBufs = sync.Pool{New: func() any { b := make([]byte, 1<<10); return &b }}

// finish reads what has arrived of the last response's end (its last
// chunk, its trailer), waiting for bytes that are not there yet only until
// until. It reports false when the connection cannot be reused: closed by
// the server, an error, bytes after the end, a malformed or overlong end.
func (ic *idleConn) finish(until time.Time) bool {
	if ic.dec.end {
		return !ic.dec.extra && !ic.dec.bad
	}
	bp := drainBufs.Get().(*[]byte)
	defer drainBufs.Put(bp)
	buf := *bp
	for read := 0; !ic.dec.end; {
		k := copy(buf, ic.carry)
		if k < len(ic.carry) {
			return false
		}
		n, err := ic.readAvailable(buf[k:], until)
		if err != nil {
			return false
		}
		if n == 0 {
			return true // the rest is still on its way: looked at again when taken
		}
		if read += n; read > maxDrain {
			return false
		}
		_, used, err := ic.dec.decode(buf[:k+n])
		if err != nil || ic.dec.bad || ic.dec.extra {
			return false
		}
		ic.carry = append(ic.carry[:0], buf[used:k+n]...)
	}
	return len(ic.carry) == 0
}

// quiet reports whether the connection, its last response read to the
// end, has nothing more to read and is still open: anything the server
// sent now would be an answer to no request.
func (ic *idleConn) quiet() bool {
	bp := drainBufs.Get().(*[]byte)
	defer drainBufs.Put(bp)
	n, err := ic.readAvailable((*bp)[:1], time.Time{})
	return n == 0 && err == nil
}

// readAvailable reads what the connection has, waiting for bytes peek
// says are there (at most drainWait: a TLS record may come in pieces), or
// for any bytes until until. It reports 0 and no error when there is
// nothing to read, and an error when the connection is gone or failed.
func (ic *idleConn) readAvailable(b []byte, until time.Time) (int, error) {
	var deadline time.Time
	now := time.Now()
	switch peek(ic.raw) {
	case peekGone:
		return 0, errNotReusable
	case peekData:
		deadline = now.Add(drainWait)
	case peekNone:
		if until.After(now) {
			deadline = until
			break
		}
		if ic.conn == ic.raw {
			return 0, nil
		}
		// A TLS connection may hold decrypted bytes already: a read
		// with an expired deadline returns those, or times out
		// without touching the socket (crypto/tls keeps the
		// connection usable after a read timeout).
		deadline = time.Unix(1, 0)
	}
	if err := ic.conn.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	n, err := ic.conn.Read(b)
	if derr := ic.conn.SetReadDeadline(time.Time{}); derr != nil {
		return 0, derr
	}
	var ne net.Error
	if n == 0 && errors.As(err, &ne) && ne.Timeout() {
		return 0, nil
	}
	if n == 0 && err == nil {
		return 0, errNotReusable
	}
	if err != nil {
		return 0, err
	}
	return n, nil
}
