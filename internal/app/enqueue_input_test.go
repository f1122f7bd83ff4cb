package app

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
)

// A negative retry count is bad input, from the flag or the environment: it used to be taken
// (and meant "no retry" to the queue).
func TestEnqueueMaxRetryNegativeRefused(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"flag": {[]string{"--max-retry", "-3", "--agent", "agent-" + uuid.NewString(), "hi"}, nil, `--max-retry "-3"`},
		"env":  {[]string{"--agent", "agent-" + uuid.NewString(), "hi"}, map[string]string{"LETTAQ_MAX_RETRY": "-3"}, `LETTAQ_MAX_RETRY="-3"`},
	} {
		var out, errOut syncBuf
		// An address where no Redis listens: the refusal must come first, whatever Redis does.
		args := append([]string{"--redis-url", "redis://127.0.0.1:1/0"}, c.args...)
		code := RunEnqueue(context.Background(), args, env(c.env), strings.NewReader(""), &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "at least 0") {
			t.Errorf("%s: exit %d, stderr %q; want exit %d naming %s and the minimum", name, code, errOut.String(), ExitUsage, c.want)
		}
	}
}

// A text on stdin over the limit is refused with its real size (it used to report the limit
// plus one, the bytes read before stopping), and without holding all of it in memory.
func TestEnqueueStdinTooLongReportsRealSize(t *testing.T) {
	const size = 5 << 20
	var out, errOut syncBuf
	stdin := bytes.NewReader(bytes.Repeat([]byte("a"), size))
	code := RunEnqueue(context.Background(), []string{"--redis-url", "redis://127.0.0.1:1/0", "--agent", "agent-" + uuid.NewString()},
		env(nil), stdin, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "5242880 bytes") {
		t.Errorf("exit %d, stderr %q; want exit %d and the real size, 5242880 bytes", code, errOut.String(), ExitUsage)
	}
	// Past the counting bound, the message says "more than" the bound.
	errOut = syncBuf{}
	stdin = bytes.NewReader(make([]byte, maxStdinCount+10))
	code = RunEnqueue(context.Background(), []string{"--redis-url", "redis://127.0.0.1:1/0", "--agent", "agent-" + uuid.NewString()},
		env(nil), stdin, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "more than") {
		t.Errorf("past the bound: exit %d, stderr %q", code, errOut.String())
	}
}

// enqueue --wait against a dev Redis that vanishes (the dev worker stopped: its queue was in its
// memory) gives up after a few tries and says why, instead of retrying until --timeout.
func TestEnqueueWaitGivesUpOnVanishedDevRedis(t *testing.T) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	var out, errOut syncBuf
	done := make(chan int, 1)
	go func() {
		done <- RunEnqueue(context.Background(), []string{"--dev", "--dev-redis-addr=" + mr.Addr(), "--agent", "agent-" + uuid.NewString(),
			"--wait", "--timeout=2m", "hello"}, env(nil), strings.NewReader(""), &out, &errOut)
	}()
	// No worker takes the turn: once it is enqueued, the Redis goes away.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errOut.String(), "enqueued task") {
		if time.Now().After(deadline) {
			t.Fatalf("not enqueued: %q", errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mr.Close()
	select {
	case code := <-done:
		if code != ExitNoRedis || !strings.Contains(errOut.String(), "in memory") {
			t.Errorf("exit %d, stderr %q; want exit %d explaining dev mode's queue is in memory", code, errOut.String(), ExitNoRedis)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("enqueue --wait still retrying 20s after the dev Redis went away; stderr so far:\n%s", errOut.String())
	}
}

// A message behind its chat's turn is scheduled the safety net ahead that the workers use:
// LETTAQ_WAIT_CHECK, or --wait-check (it was the queue's 10-minute default whatever was set).
func TestEnqueueWaitCheck(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		"default": {nil, nil, 10 * time.Minute},
		"env":     {nil, map[string]string{"LETTAQ_WAIT_CHECK": "3m"}, 3 * time.Minute},
		"flag":    {[]string{"--wait-check", "90s"}, map[string]string{"LETTAQ_WAIT_CHECK": "3m"}, 90 * time.Second},
	} {
		mr := miniredis.RunT(t)
		agent, chat := "agent-"+uuid.NewString(), "chat-"+name
		var ids []string
		for _, text := range []string{"first", "second"} {
			var out, errOut syncBuf
			args := append([]string{"--redis-url", "redis://" + mr.Addr() + "/0", "--agent", agent, "--chat", chat, "--json"}, c.args...)
			if code := RunEnqueue(context.Background(), append(args, text), env(c.env), strings.NewReader(""), &out, &errOut); code != ExitOK {
				t.Fatalf("%s: enqueue %s: exit %d, stderr %q", name, text, code, errOut.String())
			}
			var res struct {
				TaskID string `json:"task_id"`
			}
			if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res.TaskID == "" {
				t.Fatalf("%s: enqueue output %q: %v", name, out.String(), err)
			}
			ids = append(ids, res.TaskID)
		}
		insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: mr.Addr()})
		info, err := insp.GetTaskInfo(DefaultQueue, ids[1])
		_ = insp.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ahead := time.Until(info.NextProcessAt)
		if info.State != asynq.TaskStateScheduled || ahead < c.want-5*time.Second || ahead > c.want+time.Second {
			t.Errorf("%s: the second message is %s, %v ahead; want scheduled %v ahead", name, info.State, ahead.Round(time.Second), c.want)
		}
	}
}
