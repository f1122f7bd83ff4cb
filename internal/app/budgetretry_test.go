package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue"
)

// TestBudgetMaxRetryKeepsForeignTasksWaiting: with LETTAQ_MAX_RETRY=0 under ordering, /budget
// answers the max retry the worker's own /enqueue gives its tasks (1: the retry kept for put-backs; a turn that
// waits for its conversation is put back through Asynq's retry, and Asynq archives a task
// whose retries are used up). A producer in another language that writes two tasks to one
// chat with /budget's options gets both answered, the second after waiting: none archived.
func TestBudgetMaxRetryKeepsForeignTasksWaiting(t *testing.T) {
	r, _ := startDevWorkerWith(t, "--max-retry=0")
	resp, err := http.Get("http://" + r.HTTPAddr + "/budget")
	if err != nil {
		t.Fatal(err)
	}
	var info BudgetInfo
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if want := queue.TaskMaxRetry(0); info.MaxRetry != want || want < 1 {
		t.Errorf("/budget max_retry = %d under ordering %q, want %d (no retry of a failure, one kept for put-backs)", info.MaxRetry, info.Ordering, want)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: r.RedisAddr})
	defer insp.Close()

	// The worker's own /enqueue gives its tasks what /budget says.
	agent := r.Dev.Agents[DemoAgent]
	req, _ := http.NewRequest("POST", "http://"+r.HTTPAddr+"/enqueue", strings.NewReader(
		`{"agent_id":"`+agent+`","text":"own","conversation":{"integration":"web","chat_id":"own"},"message_id":"own1"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ti, err := insp.GetTaskInfo(info.EnqueueQueue, "turn:web:own:own1"); err != nil || ti.MaxRetry != info.MaxRetry {
		t.Errorf("/enqueue's task: %v; want max retry %d as /budget says", describeTask(ti, err), info.MaxRetry)
	}

	// Another producer: two tasks to one chat, the first thinking while the second arrives.
	ac := asynq.NewClient(asynq.RedisClientOpt{Addr: r.RedisAddr})
	defer ac.Close()
	ids := []string{"turn:py:c1:m1", "turn:py:c1:m2"}
	for i, text := range []string{"[[sim think=1500ms]] first", "second"} {
		payload := `{"v":1,"agent_id":"` + agent + `","text":"` + text + `","conversation":{"integration":"py","chat_id":"c1"},"message_id":"m` + string(rune('1'+i)) + `"}`
		if _, err := ac.Enqueue(asynq.NewTask(info.TaskType, []byte(payload)), asynq.TaskID(ids[i]), asynq.Queue(info.EnqueueQueue),
			asynq.MaxRetry(info.MaxRetry), asynq.Timeout(time.Duration(info.TaskTimeoutSeconds)*time.Second),
			asynq.Retention(time.Duration(info.RetentionSeconds)*time.Second)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// The first runs before the second arrives.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if ti, err := insp.GetTaskInfo(info.EnqueueQueue, ids[0]); err == nil && ti.State == asynq.TaskStateActive {
					break
				}
			}
		}
	}
	// A foreign task joins its chat's line when a worker starts it, so the second can start
	// first and the first then waits: parked, it is in no Asynq queue for a moment (not found),
	// which is not an end.
	for _, id := range ids {
		var ti *asynq.TaskInfo
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			ti, err = insp.GetTaskInfo(info.EnqueueQueue, id)
			if errors.Is(err, asynq.ErrTaskNotFound) {
				continue
			}
			if err != nil || ti.State == asynq.TaskStateCompleted || ti.State == asynq.TaskStateArchived {
				break
			}
		}
		if err != nil || ti.State != asynq.TaskStateCompleted {
			t.Errorf("task %s: %v; want completed", id, describeTask(ti, err))
		}
	}
}

func describeTask(ti *asynq.TaskInfo, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s %v, max retry %d, retried %d, last error %q", ti.ID, ti.State, ti.MaxRetry, ti.Retried, ti.LastErr)
}
