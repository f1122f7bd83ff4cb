package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// A deployment recorded with one shard: a worker and an enqueue started with 4 exit 2, naming
// both layouts; the same layout starts (and answers GET /budget's layout).
func TestShardLayoutMismatchExitsTwo(t *testing.T) {
	m := miniredis.RunT(t)
	const q = "lettaq-unit-layout"
	recorded := "scheme=1 shards=1 queue=" + q + " prefix=lettaq:"
	if err := m.Set("lettaq:layout:"+q, recorded); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"REDIS_URL": "redis://" + m.Addr() + "/0", "LETTAQ_HTTP_ADDR": "off", "LETTAQ_QUEUES": q,
		"LETTAQ_QUEUE": q, "LETTAQ_SHARDS": "4", "LETTA_BASE_URL": "http://127.0.0.1:1"}
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := RunWorker(ctx, nil, getenv, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), recorded) || !strings.Contains(errOut.String(), "shards=4 queue="+q) {
		t.Errorf("worker: exit %d, want %d naming both layouts:\n%s", code, ExitUsage, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code = RunEnqueue(ctx, []string{"--agent", "agent-00000000-0000-4000-8000-000000000000", "hello"}, getenv, strings.NewReader(""), &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), recorded) || !strings.Contains(errOut.String(), "docs/operations.md") {
		t.Errorf("enqueue: exit %d, want %d naming the recorded layout:\n%s", code, ExitUsage, errOut.String())
	}
	if keys := m.Keys(); len(keys) != 1 {
		t.Errorf("the refused worker and enqueue wrote %v", keys)
	}
}
