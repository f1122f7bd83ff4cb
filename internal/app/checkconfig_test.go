package app

import (
	"context"
	"strings"
	"testing"
	"time"
)

// worker check-config answers from the configuration alone: 2 with the worker's reason when it
// would not start, 0 when it would, without connecting to anything (the Redis here does not
// exist).
func TestWorkerCheckConfig(t *testing.T) {
	base := map[string]string{"LETTAQ_HTTP_ADDR": "0.0.0.0:8080", "REDIS_URL": "redis://127.0.0.1:1/0"}
	run := func(extra map[string]string) (int, string, string) {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		var out, errOut syncBuf
		code := RunWorker(context.Background(), []string{"check-config"}, env(m), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, _, errOut := run(nil); code != ExitUsage || !strings.Contains(errOut, "LETTAQ_HTTP_TOKEN") {
		t.Errorf("no token: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(map[string]string{"LETTAQ_HTTP_TOKEN": "a-token", "REDIS_URL": "http://redis:6379"}); code != ExitUsage || !strings.Contains(errOut, "REDIS_URL") {
		t.Errorf("bad REDIS_URL: exit %d, stderr %q", code, errOut)
	}
	start := time.Now()
	if code, out, errOut := run(map[string]string{"LETTAQ_HTTP_TOKEN": "a-token"}); code != ExitOK || !strings.Contains(out, "configuration ok") {
		t.Errorf("good configuration: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("check-config took %v: it must not wait for Redis", d)
	}
}
