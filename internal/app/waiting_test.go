package app

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// scrapeWaiting reads lettaq_turns_waiting{queue="lettaq"} from the worker's /metrics.
func scrapeWaiting(t *testing.T, r *Running) int {
	t.Helper()
	return scrapeQueueGauge(t, r, "lettaq_turns_waiting")
}

// scrapeQueueGauge reads name{queue="lettaq"} from the worker's /metrics.
func scrapeQueueGauge(t *testing.T, r *Running, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + r.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + `\{queue="lettaq"\} (\d+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, b)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestWaitingTurnsAreScheduledNotRetried: three messages to one chat while the first runs. The
// two behind it wait as scheduled tasks (never in the retry state with an ordering error), are
// woken in order as the turn ahead ends, none uses a retry, and lettaq_turns_waiting shows them;
// /turns/{id} says a turn waits, and once it ended shows its summary, result and journal.
func TestWaitingTurnsAreScheduledNotRetried(t *testing.T) {
	r := startDevWorker(t)
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: r.RedisAddr})
	defer insp.Close()

	// Watch every state the tasks go through, from before the first enqueue to the end.
	var mu sync.Mutex
	var ids []string
	seen := map[string][]string{}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			mu.Lock()
			for _, id := range ids {
				if info, err := insp.GetTaskInfo(DefaultQueue, id); err == nil {
					st := info.State.String()
					if info.LastErr != "" {
						st += " (" + info.LastErr + ")"
					}
					if s := seen[id]; len(s) == 0 || s[len(s)-1] != st {
						seen[id] = append(s, st)
					}
				}
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond): // sampling rate of the watcher, not a wait
			}
		}
	}()

	texts := []string{"[[sim think=1500ms]] w1", "w2", "w3"}
	for i, text := range texts {
		code, out, errOut := enqueue(t, r, "--chat=waiting", "--message-id=w"+strconv.Itoa(i+1), "--json", text)
		var res queue.EnqueueResult
		if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("enqueue %d: exit %d %q %q", i+1, code, out, errOut)
		}
		if res.Position != i {
			t.Errorf("message %d at position %d, want %d", i+1, res.Position, i)
		}
		mu.Lock()
		ids = append(ids, res.TaskID)
		mu.Unlock()
	}
	for _, id := range ids[1:] {
		info, err := insp.GetTaskInfo(DefaultQueue, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != asynq.TaskStateScheduled || info.LastErr != "" {
			t.Errorf("waiting task %s: %v %q, want scheduled without an error", id, info.State, info.LastErr)
		}
	}
	if n := scrapeWaiting(t, r); n != 2 {
		t.Errorf("lettaq_turns_waiting = %d while two turns wait, want 2", n)
	}
	if v := getTurn(t, r, ids[2], http.StatusOK); v.State != "scheduled" || !strings.HasPrefix(v.Summary, "waiting behind "+ids[0]) ||
		v.Waiting == nil || v.Waiting.Position != 2 || v.Waiting.Behind != ids[0] {
		t.Errorf("/turns/%s while it waits: %+v", ids[2], v)
	}

	// The last one's answer (enqueue again: a duplicate, followed to its answer).
	if code, out, errOut := enqueue(t, r, "--chat=waiting", "--message-id=w3", "--wait", "--timeout=60s", "w3"); code != ExitOK || !strings.Contains(out, "you said: w3") {
		t.Fatalf("w3: exit %d %q %q", code, out, errOut)
	}
	for _, id := range ids {
		// The answer is written before the handler returns: Asynq completes the task just after.
		info, err := insp.GetTaskInfo(DefaultQueue, id)
		for deadline := time.Now().Add(10 * time.Second); err == nil && info.State == asynq.TaskStateActive && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			info, err = insp.GetTaskInfo(DefaultQueue, id)
		}
		if err != nil {
			t.Fatal(err)
		}
		if info.State != asynq.TaskStateCompleted || info.Retried != 0 {
			t.Errorf("task %s: %v retried %d, want completed, retried 0", id, info.State, info.Retried)
		}
		// The monitor shows the result raw: a line for people comes first.
		if res := string(info.Result); !strings.HasPrefix(res, `{"summary":"answered in `) || !strings.Contains(res, "you said: w") {
			t.Errorf("task %s result %s", id, res)
		}
	}
	close(stop)
	<-watched
	for id, states := range seen {
		for _, s := range states {
			if strings.HasPrefix(s, "retry") || strings.Contains(s, "not your turn") {
				t.Errorf("task %s went through %v", id, states)
				break
			}
		}
	}
	t.Logf("states: %v", seen)

	var got []string
	for _, m := range r.Dev.Sim.UserMessages(r.Dev.Agents[DemoAgent]) {
		got = append(got, m.Text[strings.LastIndexByte(m.Text, ' ')+1:])
	}
	if strings.Join(got, ",") != "w1,w2,w3" {
		t.Errorf("the agent received %v, want w1,w2,w3", got)
	}
	if n := scrapeWaiting(t, r); n != 0 {
		t.Errorf("lettaq_turns_waiting = %d once all answered, want 0", n)
	}
	v := getTurn(t, r, ids[0], http.StatusOK)
	var res queue.TurnResult
	if err := json.Unmarshal(v.Result, &res); err != nil || res.Answer != "you said: w1" || v.State != "completed" ||
		!strings.HasPrefix(v.Summary, "answered in ") || v.Journal == nil || v.Journal.Outcome != record.OutcomeAnswered {
		t.Errorf("/turns/%s once answered: %+v (%v)", ids[0], v, err)
	}
	getTurn(t, r, "turn:cli:waiting:nope", http.StatusNotFound)
}

// getTurn reads GET /turns/{id} of the worker's listener, expecting code.
func getTurn(t *testing.T, r *Running, id string, code int) turnView {
	t.Helper()
	resp, err := http.Get("http://" + r.HTTPAddr + "/turns/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v turnView
	if resp.StatusCode != code || json.NewDecoder(resp.Body).Decode(&v) != nil {
		t.Fatalf("/turns/%s = %d, want %d", id, resp.StatusCode, code)
	}
	return v
}

// monitorID is a task id as asynqmon's task tables show it: up to its first '-' (asynqmon's
// ui/src/utils.ts uuidPrefix).
func monitorID(id string) string {
	if i := strings.IndexByte(id, '-'); i >= 0 {
		return id[:i]
	}
	return id
}

// TestWaitingTurnIsFindable: a turn that waits and never started (no journal
// record yet) is found by /turns and enqueue journal show, by its full task id and by the id
// as the monitor shows it, and says what it waits behind.
func TestWaitingTurnIsFindable(t *testing.T) {
	r := startDevWorker(t)
	var ids []string
	for i, text := range []string{"[[sim think=1500ms]] f1", "f2"} {
		code, out, errOut := enqueue(t, r, "--chat=find", "--message-id=f"+strconv.Itoa(i+1)+"-x", "--json", text)
		var res queue.EnqueueResult
		if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("enqueue %d: exit %d %q %q", i+1, code, out, errOut)
		}
		ids = append(ids, res.TaskID)
	}
	short := monitorID(ids[1])
	if short == ids[1] {
		t.Fatalf("the monitor shows %s whole", ids[1])
	}
	for _, id := range []string{ids[1], short} {
		v := getTurn(t, r, id, http.StatusOK)
		if v.TaskID != ids[1] || v.Waiting == nil || v.Waiting.State != "waiting behind "+ids[0] || !strings.HasPrefix(v.Summary, "waiting behind "+ids[0]) {
			t.Errorf("/turns/%s while it waits: %+v (waiting %+v)", id, v, v.Waiting)
		}
		code, out, errOut := enqueue(t, r, "journal", "show", id)
		if code != ExitOK || !strings.Contains(out, "waiting behind "+ids[0]) || !strings.Contains(out, ids[1]) {
			t.Errorf("journal show %s while it waits: exit %d %q %q", id, code, out, errOut)
		}
	}
	if code, out, errOut := enqueue(t, r, "--chat=find", "--message-id=f2-x", "--wait", "--timeout=60s", "f2"); code != ExitOK || !strings.Contains(out, "you said: f2") {
		t.Fatalf("f2: exit %d %q %q", code, out, errOut)
	}
}
