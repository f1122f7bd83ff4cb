package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Found by following the README from a fresh clone.

// A demo agent's answer reaches the reply stream in several answer_delta events, so the live
// view shows it grow (with the queue's default batching of a second, a demo answer, which
// streams in well under a second, arrived as one delta).
func TestDevAnswerGrows(t *testing.T) {
	r := startDevWorker(t)
	text := "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"
	code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--json", text)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var deltas []string
	for _, l := range strings.Split(out, "\n") {
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Text      string `json:"text"`
				Narration bool   `json:"narration"`
			} `json:"data"`
		}
		if json.Unmarshal([]byte(l), &ev) != nil || ev.Type != "answer_delta" || ev.Data.Narration {
			continue
		}
		deltas = append(deltas, ev.Data.Text)
	}
	if len(deltas) < 3 || strings.Join(deltas, "") != "you said: "+text {
		t.Fatalf("answer deltas %q: want the answer in at least 3 pieces", deltas)
	}
}

// The dev worker's greeting names the enqueue command the way the worker was run, so its
// lines run as printed from where the user is.
func TestGreetingNamesEnqueueBesideWorker(t *testing.T) {
	for arg0, want := range map[string]string{
		"/tmp/go-build123/b001/exe/worker": "go run ./cmd/enqueue",
		"bin/worker":                       "bin/enqueue",
		"./bin/worker":                     "./bin/enqueue",
		"./worker":                         "./enqueue",
		"worker":                           "enqueue",
		"/usr/local/bin/worker":            "/usr/local/bin/enqueue",
		"/opt/my tools/worker":             "'/opt/my tools/enqueue'",
	} {
		if got := greetingEnqueue(arg0); got != want {
			t.Errorf("greetingEnqueue(%q) = %q, want %q", arg0, got, want)
		}
	}
}

// /turns/ takes what enqueue journal show takes: a task id, an otid, or the unique beginning
// of either (the monitor's ID column shows "turn:14e5a25f"), so an id copied from the monitor
// or the journal table finds its turn.
func TestTurnsTakesPrefixes(t *testing.T) {
	r := startDevWorker(t)
	type res struct {
		TaskID string `json:"task_id"`
		Otid   string `json:"otid"`
	}
	var turns []res
	for _, text := range []string{"one", "two"} {
		code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--json", text)
		if code != ExitOK {
			t.Fatalf("enqueue %s: exit %d %q", text, code, errOut)
		}
		var x res
		if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &x); err != nil || x.TaskID == "" {
			t.Fatalf("enqueue result %q: %v", out, err)
		}
		turns = append(turns, x)
	}
	for _, id := range []string{turns[0].TaskID[:len("turn:")+8], turns[0].TaskID[:len("turn:")+8] + "…", turns[0].Otid, turns[0].Otid[:8]} {
		if v := getTurn(t, r, id, http.StatusOK); v.TaskID != turns[0].TaskID || v.State != "completed" || v.Journal == nil {
			t.Errorf("/turns/%s: %+v, want the turn %s", id, v, turns[0].TaskID)
		}
	}
	getTurn(t, r, "turn:", http.StatusConflict) // both turns' ids begin so
	getTurn(t, r, "turn:zzzz", http.StatusNotFound)
}
