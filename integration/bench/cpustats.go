package main

import (
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMark is where the CPU clocks stood at one moment: this process's CPU
// (the worker and the enqueuing client of a run, or the bare Asynq server
// and client), a child's (the simulator), and the machine's busy and total
// time (/proc/stat). Two marks give the CPU each spent in between.
type cpuMark struct {
	self, child      time.Duration
	alloc, mallocs   uint64 // this process's heap allocation so far (runtime/metrics)
	busy, total      time.Duration
	childOK, statsOK bool
	// System calls of the read and write families (/proc/<pid>/io: read,
	// write, readv, writev… on sockets too; not epoll or futex) of this
	// process, the child and Redis (when its process is on this machine).
	io, childIO, redisIO procIO
	sched                schedMark
}

// schedMark is this process's scheduler so far (runtime/metrics): goroutines
// started, GC cycles, and how long goroutines waited runnable before they ran.
type schedMark struct {
	goroutines, gcs uint64
	wait            *metrics.Float64Histogram
}

// meanWait is the mean time a goroutine waited runnable between a and b
// (bucket midpoints; an open-ended bucket counts as its finite bound), and
// how many waits it counts.
func meanWait(a, b schedMark) (time.Duration, uint64) {
	if a.wait == nil || b.wait == nil || len(a.wait.Counts) != len(b.wait.Counts) {
		return 0, 0
	}
	var n uint64
	var sum float64
	for i := range b.wait.Counts {
		c := b.wait.Counts[i] - a.wait.Counts[i]
		if c == 0 {
			continue
		}
		lo, hi := b.wait.Buckets[i], b.wait.Buckets[i+1]
		mid := (lo + hi) / 2
		switch {
		case math.IsInf(lo, -1):
			mid = hi
		case math.IsInf(hi, 1):
			mid = lo
		}
		n += c
		sum += float64(c) * mid
	}
	if n == 0 {
		return 0, 0
	}
	return time.Duration(sum / float64(n) * 1e9), n
}

// procIO is a process's read and write system calls so far.
type procIO struct {
	r, w uint64
	ok   bool
}

// readProcIO reads syscr and syscw from /proc/<pid>/io ("self" for this
// process).
func readProcIO(pid string) procIO {
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		return procIO{}
	}
	var io procIO
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		u, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "syscr":
			io.r, n = u, n+1
		case "syscw":
			io.w, n = u, n+1
		}
	}
	io.ok = n == 2
	return io
}

// perUnit is what a to b advanced, per unit of n (zero unless both were read).
func (b procIO) perUnit(a procIO, n int) (r, w float64, ok bool) {
	if !a.ok || !b.ok || n <= 0 {
		return 0, 0, false
	}
	return float64(b.r-a.r) / float64(n), float64(b.w-a.w) / float64(n), true
}

// clockTick is USER_HZ, the unit of /proc's CPU times (100 on Linux).
const clockTick = 10 * time.Millisecond

func markCPU(childPID, redisPID int) cpuMark {
	var m cpuMark
	m.io = readProcIO("self")
	if childPID > 0 {
		m.childIO = readProcIO(strconv.Itoa(childPID))
	}
	if redisPID > 0 {
		m.redisIO = readProcIO(strconv.Itoa(redisPID))
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		m.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if childPID > 0 {
		m.child, m.childOK = procCPU(childPID)
	}
	m.busy, m.total, m.statsOK = machineCPU()
	m.alloc, m.mallocs, m.sched = readRuntime()
	return m
}

// readRuntime reads this process's runtime/metrics in one call (cheap, no
// stop-the-world): what it allocated on the heap so far (bytes and objects)
// and its scheduler (schedMark).
func readRuntime() (bytes, objects uint64, m schedMark) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"},
		{Name: "/sched/goroutines-created:goroutines"}, {Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	bytes, objects = u(0), u(1)
	m.goroutines, m.gcs = u(2), u(3)
	if s[4].Value.Kind() == metrics.KindFloat64Histogram {
		m.wait = s[4].Value.Float64Histogram()
	}
	return bytes, objects, m
}

// procCPU reads a process's user + system time from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may hold spaces: count fields
	// after the last ')'. utime and stime are fields 14 and 15 (1-based),
	// i.e. the 12th and 13th after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * clockTick, true
}

// machineCPU reads the machine's busy and total CPU time, all CPUs, from
// /proc/stat (busy = total less idle and iowait).
func machineCPU() (busy, total time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, false
	}
	var sum, idle int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i >= 8 { // guest times are already counted in user and nice
			break
		}
		sum += n
		if i == 3 || i == 4 { // idle, iowait
			idle += n
		}
	}
	return time.Duration(sum-idle) * clockTick, time.Duration(sum) * clockTick, true
}

// cpuSpent is what each clock advanced from a to b, per unit of n.
type cpuSpent struct {
	Self, Child time.Duration // per unit
	Busy        float64       // the machine's busy share, 0..1 (of all its CPUs)
	// Alloc and Mallocs: bytes and objects the bench's process allocated, per unit.
	Alloc, Mallocs uint64
	// Goroutines started and GC cycles per unit, and the mean time a
	// goroutine waited runnable before it ran (Waits: the runtime's samples
	// of such waits per unit; it samples, so this is not a count of runs).
	Goroutines, GCs, Waits float64
	RunnableWait           time.Duration
	ChildOK                bool
	// Read and write system calls per unit: this process, the child, Redis
	// (each with whether it was read).
	Reads, Writes, ChildReads, ChildWrites, RedisReads, RedisWrites float64
	IOOK, ChildIOOK, RedisIOOK                                      bool
}

func spentCPU(a, b cpuMark, n int) cpuSpent {
	var s cpuSpent
	if n <= 0 {
		return s
	}
	s.Self = (b.self - a.self) / time.Duration(n)
	s.Alloc, s.Mallocs = (b.alloc-a.alloc)/uint64(n), (b.mallocs-a.mallocs)/uint64(n)
	s.Goroutines = float64(b.sched.goroutines-a.sched.goroutines) / float64(n)
	s.GCs = float64(b.sched.gcs-a.sched.gcs) / float64(n)
	var waits uint64
	s.RunnableWait, waits = meanWait(a.sched, b.sched)
	s.Waits = float64(waits) / float64(n)
	if a.childOK && b.childOK {
		s.Child, s.ChildOK = (b.child-a.child)/time.Duration(n), true
	}
	s.Reads, s.Writes, s.IOOK = b.io.perUnit(a.io, n)
	s.ChildReads, s.ChildWrites, s.ChildIOOK = b.childIO.perUnit(a.childIO, n)
	s.RedisReads, s.RedisWrites, s.RedisIOOK = b.redisIO.perUnit(a.redisIO, n)
	if a.statsOK && b.statsOK && b.total > a.total {
		s.Busy = float64(b.busy-a.busy) / float64(b.total-a.total)
	}
	return s
}
