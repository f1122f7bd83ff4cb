package rediscluster

import "syscall"

// procAttr puts redis-server in a process group of its own (killed as one
// with killGroup) and has the kernel kill it should the test binary die
// before its cleanup runs.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group pid leads.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
