package app

import (
	"os"
	"path/filepath"
	"testing"
)

func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestMemoryLimitFromCgroup(t *testing.T) {
	const gib = 1 << 30
	cases := []struct {
		name  string
		env   map[string]string
		files map[string]string
		limit int64
		from  string
	}{
		{"cgroup v2, own group", nil, map[string]string{
			"proc/self/cgroup":                       "0::/kubepods/pod1\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max": "1073741824\n",
		}, gib * 9 / 10, "/sys/fs/cgroup/kubepods/pod1/memory.max"},
		{"cgroup v2, namespaced root", nil, map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, 536870912 * 9 / 10, "/sys/fs/cgroup/memory.max"},
		{"cgroup v2, no limit", nil, map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n",
		}, 0, ""},
		{"cgroup v1 inside a container", nil, map[string]string{
			"proc/self/cgroup":                           "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "2147483648",
		}, 2 * gib * 9 / 10, "/sys/fs/cgroup/memory/memory.limit_in_bytes"},
		{"cgroup v1, no limit", nil, map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0, ""},
		{"no cgroup files", nil, nil, 0, ""},
		{"GOMEMLIMIT wins", map[string]string{"GOMEMLIMIT": "300MiB"}, map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, -1, "GOMEMLIMIT"},
		{"GOMEMLIMIT=off disables", map[string]string{"GOMEMLIMIT": "off"}, map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "536870912\n",
		}, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			limit, from := memoryLimit(env(tc.env), fakeRoot(t, tc.files))
			if from != tc.from || (tc.limit >= 0 && limit != tc.limit) {
				t.Fatalf("limit %d from %q, want %d from %q", limit, from, tc.limit, tc.from)
			}
		})
	}
}
