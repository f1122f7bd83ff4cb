package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// enqueue notify writes one notify event per key into the chat's stream: without --key it
// mints one and prints it (before the call) for a retry; with --key a second call says it was
// already notified and writes nothing; the same key with another text is refused naming --key
// (exit 2); bad input exits 2 naming the flag, before anything connects. POST /notify on the
// worker answers 202, and the same body again 202 with the same entry.
func TestEnqueueNotifyDev(t *testing.T) {
	r := startDevWorker(t)
	code, out, errOut := enqueue(t, r, "notify", "--chat=web:c1", "Your report is ready.")
	m := regexp.MustCompile(`notify key (\S+) \(minted\): to retry this notify without a second message, give --key (\S+)`).FindStringSubmatch(errOut)
	if code != ExitOK || m == nil || m[1] != m[2] || !strings.Contains(out, "notified web:c1: task notify:"+m[1]+", entry ") {
		t.Fatalf("notify without --key: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	for i, want := range []string{"notified web:c1: task notify:daily-1, entry ", "already notified web:c1 with key daily-1 (entry "} {
		code, out, errOut := enqueue(t, r, "notify", "--chat", "web:c1", "--key", "daily-1", "Daily digest: 3 new items.")
		if code != ExitOK || !strings.Contains(out, want) || errOut != "" {
			t.Fatalf("notify --key, call %d: exit %d\nstdout %q\nstderr %q", i+1, code, out, errOut)
		}
	}
	code, out, errOut = enqueue(t, r, "notify", "--json", "--chat=web:c1", "--key=daily-1", "Another text")
	if code != ExitUsage || !strings.Contains(errOut, `--key: queue: notify key "daily-1" was used in chat web:c1 for another text`) {
		t.Fatalf("same key, other text: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"notify", "hello"}, "--chat is required"},
		{[]string{"notify", "--chat=bad integration:1", "hello"}, `--chat "bad integration:1": integration "bad integration" must not contain ':' or whitespace`},
		{[]string{"notify", "--chat=web:", "hello"}, `--chat "web:": has no chat id`},
		{[]string{"notify", "--chat=web:c1", "--key=a:b", "hello"}, `--key: "a:b" holds ':'`},
		{[]string{"notify", "--chat=web:c1", "--key=k"}, "the text (argument or stdin) must not be empty"},
		{[]string{"notify", "--chat=web:c1", "--key=k", strings.Repeat("x", queue.MaxNotifyTextBytes+1)}, "the text (argument or stdin) is 16385 bytes, more than the limit of 16384"},
	} {
		code, _, errOut := enqueue(t, r, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, "enqueue: notify: "+tc.says) {
			t.Errorf("%q: exit %d, stderr %q; want 2 saying %q", tc.args, code, errOut, tc.says)
		}
	}

	body := []byte(`{"chat": "web:c1", "text": "Build 42 passed.", "key": "build-42"}`)
	var answers []map[string]any
	for range 2 {
		resp, err := http.Post("http://"+r.HTTPAddr+"/notify", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var a map[string]any
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &a) != nil {
			t.Fatalf("POST /notify: %d %s", resp.StatusCode, b)
		}
		answers = append(answers, a)
	}
	if answers[0]["id"] != answers[1]["id"] || answers[0]["task_id"] != "notify:build-42" || answers[1]["duplicate"] != true {
		t.Errorf("POST /notify twice: %v then %v; want the same entry, the second a duplicate", answers[0], answers[1])
	}

	rdb := redis.NewClient(&redis.Options{Addr: r.RedisAddr})
	defer rdb.Close()
	evs, _, err := queue.NewReplies(rdb, queue.RepliesOptions{}).Read(context.Background(), record.Conversation{Integration: "web", ChatID: "c1"}, "0", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, string(ev.Type)+" "+ev.TaskID+" "+ev.Text)
	}
	want := []string{"notify notify:" + m[1] + " Your report is ready.", "notify notify:daily-1 Daily digest: 3 new items.", "notify notify:build-42 Build 42 passed."}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the chat's stream holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// enqueue --help tells of notify and its --key.
func TestEnqueueHelpTellsOfNotify(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := RunEnqueue(context.Background(), []string{"--help"}, env(nil), nil, &out, &errOut); code != ExitOK {
		t.Fatalf("--help: exit %d %s", code, errOut.String())
	}
	for _, s := range []string{"enqueue [flags] notify --chat [INTEGRATION:]CHAT_ID [--key KEY] TEXT", "--key KEY", "At most 16384 bytes of text"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("--help lacks %q", s)
		}
	}
}
