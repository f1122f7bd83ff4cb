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
type rawSource struct {
	conn net.Conn
	rc   syscall.RawConn
	rd   *sseReader
	n    int
	err  error
	fn   func(fd uintptr) bool // readFD, bound once
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
	s.rd, s.n, s.err = rd, 0, nil
	err := s.rc.Read(s.fn)
	n, rerr := s.n, s.err
	s.rd, s.err = nil, nil
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
