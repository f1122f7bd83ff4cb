//go:build unix

package agentclient

import (
	"io"
	"net"
	"os"
	"syscall"
)

// rawSource reads a TCP connection through its syscall.RawConn: the wait
// for bytes holds no buffer (the runtime's poller waits on the descriptor),
// and the buffer is taken only once bytes are there. Closing the connection
// ends a waiting read, as it does a net.Conn Read.
//
// A stepwise source (StreamOptions.Stepwise) does not read under read: read
// reports errPending, and the caller, having returned to a shallow frame,
// calls wait, which reads (waiting first when nothing is there); the next
// read hands its result on. Reading only in wait costs no system call more
// than reading under read: a read that found nothing would be followed by
// the wait's own (the poller forgets readiness when a wait begins).
type rawSource struct {
	conn net.Conn
	rc   syscall.RawConn
	rd   *sseReader
	n    int
	err  error
	fn   func(fd uintptr) bool // readFD, bound once

	step    bool // read reports errPending: wait reads
	ready   bool // wait read: n, err and werr are the next read's result
	werr    error
	onEvent func(Event) // the pending stream's event handler (StreamOptions.OnEvent)
}

// newRawSource returns nil when conn has no descriptor to wait on.
func newRawSource(conn net.Conn) *rawSource {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	s := &rawSource{conn: conn, rc: rc}
	s.fn = s.readFD
	return s
}

func (s *rawSource) waitsBare() bool { return true }

func (s *rawSource) read(rd *sseReader) (int, error) {
	if s.ready {
		s.ready = false
		return s.result(s.werr)
	}
	if s.step {
		return 0, errPending
	}
	s.rd, s.n, s.err = rd, 0, nil
	err := s.rc.Read(s.fn)
	return s.result(err)
}

// wait reads the connection, waiting until it has bytes (or ends: closed
// by a clock or by the end of the caller's context); the next read returns
// what it read. Its frames are the runtime's poller and this
// one: a pending stream's goroutine waits shallow. A wait whose result the
// next read has not taken yet returns at once: reading again would read
// over it.
func (s *rawSource) wait(rd *sseReader) {
	if s.ready {
		return
	}
	s.rd, s.n, s.err = rd, 0, nil
	s.werr = s.rc.Read(s.fn)
	s.ready, s.rd = true, nil
}

// result is a read's outcome: err is the RawConn's (the connection closed
// under the wait), s.n and s.err readFD's.
func (s *rawSource) result(err error) (int, error) {
	n, rerr := s.n, s.err
	s.rd, s.err, s.werr = nil, nil, nil
	switch {
	case rerr != nil:
		return n, &net.OpError{Op: "read", Net: s.conn.LocalAddr().Network(), Source: s.conn.LocalAddr(),
			Addr: s.conn.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case err != nil:
		return n, err // closed under the wait
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readFD is the RawConn callback: it reports false (wait, then call again)
// when nothing can be read yet.
func (s *rawSource) readFD(fd uintptr) bool {
	p := s.rd.space()
	for {
		n, err := syscall.Read(int(fd), p)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			s.rd.unspace()
			return false
		case nil:
			s.n = n
		default:
			s.err = err
		}
		return true
	}
}
