//go:build unix

package agentclient

import (
	"net"
	"syscall"
)

// canPeek says whether idle connections can be checked without a read
// that waits (see peek).
const canPeek = true

// peek looks at what an idle TCP connection has to read, without taking it
// and without waiting: nothing (the server keeps it open, peekNone), bytes
// (peekData), or its end (peekGone: the server closed it, or reset it).
// This is what net/http's idle connections learn from the read they keep
// running, at the cost of a goroutine each; here it is one syscall when
// the connection is taken.
func peek(conn net.Conn) peekResult {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return peekGone
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekGone
	}
	res := peekGone
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				res = peekNone
			case err == nil && n > 0:
				res = peekData
			}
			return true // never wait
		}
	})
	if err != nil {
		return peekGone
	}
	return res
}
