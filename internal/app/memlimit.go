package app

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// A worker holding thousands of thinking turns has a large, stable live heap and allocates
// little, so with the Go GC's default pacing most of its resident memory is headroom (the heap
// may grow to twice what is live before a collection). A memory limit makes the GC collect
// before the headroom is spent instead. GOMEMLIMIT, when set, is the runtime's own and always
// wins; otherwise the worker takes memoryLimitFraction of its container's memory limit (cgroup
// v2 or v1), leaving the rest for what the GC does not manage.
const memoryLimitFraction = 0.9

// noCgroupLimit: cgroup v1 reports "no limit" as a huge number near 2^63.
const noCgroupLimit = 1 << 60

// memoryLimit decides the GC's memory limit. It returns the limit (0 for none), and where it
// came from: "GOMEMLIMIT", the cgroup file it was read from, or "".
func memoryLimit(getenv func(string) string, root string) (int64, string) {
	switch v := getenv("GOMEMLIMIT"); v {
	case "":
	case "off":
		return 0, ""
	default:
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	limit, file := cgroupMemoryLimit(root)
	if limit <= 0 {
		return 0, ""
	}
	return int64(float64(limit) * memoryLimitFraction), file
}

// applyMemoryLimit sets the limit memoryLimit decides, and returns it.
func applyMemoryLimit(getenv func(string) string) (int64, string) {
	limit, from := memoryLimit(getenv, "/")
	if limit > 0 && from != "GOMEMLIMIT" {
		debug.SetMemoryLimit(limit)
	}
	return limit, from
}

// cgroupMemoryLimit reads this process's cgroup memory limit under root ("/" but in tests):
// cgroup v2's memory.max of the process's own group, else cgroup v1's memory.limit_in_bytes.
func cgroupMemoryLimit(root string) (int64, string) {
	groups := selfCgroups(filepath.Join(root, "proc/self/cgroup"))
	var candidates []string
	if p, ok := groups[""]; ok { // cgroup v2: "0::/path"
		candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup", p, "memory.max"),
			filepath.Join(root, "sys/fs/cgroup/memory.max"))
	}
	if p, ok := groups["memory"]; ok {
		candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup/memory", p, "memory.limit_in_bytes"))
	}
	candidates = append(candidates, filepath.Join(root, "sys/fs/cgroup/memory/memory.limit_in_bytes"))
	for _, f := range candidates {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, ""
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= noCgroupLimit {
			return 0, ""
		}
		return n, strings.TrimPrefix(f, filepath.Clean(root))
	}
	return 0, ""
}

// selfCgroups maps each controller of /proc/self/cgroup to its path ("" for cgroup v2).
func selfCgroups(file string) map[string]string {
	out := map[string]string{}
	f, err := os.Open(file)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}
