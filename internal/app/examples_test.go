package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The reply-stream consumers of docs/enqueue-from-other-languages.md, in Python (redis-py) and
// Node (ioredis), follow a dev worker's turn to its answer. Each runs when its interpreter and
// client library are there (.ci/run installs them), and is skipped otherwise. A notify written
// into the chat before the turn (a message of its own, task id notify:<key>) is passed over.
func TestOtherLanguageConsumersFollowToTheAnswer(t *testing.T) {
	examples, err := filepath.Abs("../../docs/examples")
	if err != nil {
		t.Fatal(err)
	}
	type consumer struct {
		name string
		cmd  []string // the script's command, less its arguments
	}
	var consumers []consumer
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import redis").Run() == nil {
			consumers = append(consumers, consumer{"python (" + py + ")", []string{py, filepath.Join(examples, "python", "follow_reply.py")}})
			break
		}
	}
	if len(consumers) == 0 {
		t.Log("python: no python3 with redis-py (pip install redis, or apt-get install python3-redis): not run")
	}
	if _, err := os.Stat(filepath.Join(examples, "node", "node_modules", "ioredis")); err == nil {
		if _, err := exec.LookPath("node"); err == nil {
			consumers = append(consumers, consumer{"node", []string{"node", filepath.Join(examples, "node", "follow-reply.js")}})
		}
	} else {
		t.Log("node: no docs/examples/node/node_modules/ioredis (npm install in docs/examples/node): not run")
	}
	if len(consumers) == 0 {
		t.Skip("no consumer can run here")
	}
	r := startDevWorker(t)
	for _, c := range consumers {
		t.Run(c.name, func(t *testing.T) {
			chat := "ex-" + strings.Fields(c.name)[0]
			text := "one two three four five six seven eight nine ten"
			if code, _, errOut := enqueue(t, r, "notify", "--chat=web:"+chat, "--key=before", "A notify before the turn"); code != ExitOK {
				t.Fatalf("enqueue notify: exit %d %q", code, errOut)
			}
			code, out, errOut := enqueue(t, r, "--json", "--chat="+chat, "--integration=web", text)
			if code != ExitOK {
				t.Fatalf("enqueue: exit %d %q", code, errOut)
			}
			var res struct {
				TaskID string `json:"task_id"`
			}
			if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &res); err != nil || res.TaskID == "" {
				t.Fatalf("enqueue result %q: %v", out, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, c.cmd[0], append(c.cmd[1:], "web", chat, res.TaskID)...)
			cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+r.RedisAddr+"/0", "LETTAQ_KEY_PREFIX=lettaq:", "FOLLOW_TIMEOUT_MS=30000")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err != nil || strings.TrimSpace(stdout.String()) != "you said: "+text {
				t.Errorf("%s: %v; stdout %q, stderr %q; want the answer", c.name, err, stdout.String(), stderr.String())
			}
		})
	}
}
