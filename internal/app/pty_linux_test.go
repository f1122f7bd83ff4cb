package app

import (
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

// openPTY opens a pseudo-terminal: the command writes to tty (a terminal, as IsTerminal sees
// it), and what a terminal would receive is read from the master into out.
func openPTY(t *testing.T) (tty *os.File, out func() string) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	var n, unlock uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		master.Close()
		t.Skipf("unlockpt: %v", e)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		master.Close()
		t.Skipf("ptsname: %v", e)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Skipf("open the pty: %v", err)
	}
	var (
		mu   sync.Mutex
		buf  []byte
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		p := make([]byte, 4096)
		for {
			k, err := master.Read(p)
			mu.Lock()
			buf = append(buf, p[:k]...)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	closed := false
	t.Cleanup(func() {
		if !closed {
			tty.Close()
			master.Close()
			<-done
		}
	})
	return tty, func() string {
		// Close the terminal so that everything written is read, then return it.
		if !closed {
			closed = true
			tty.Close()
			<-done
			master.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		return string(buf)
	}
}
