package app

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue"
)

// turnView is what GET /turns/{task-id} answers: lettaq's view of one turn, for an operator.
type turnView struct {
	// Summary: one line for people (the result's summary once the turn ended, else what the
	// task is doing now).
	Summary   string `json:"summary"`
	TaskID    string `json:"task_id"`
	Queue     string `json:"queue,omitempty"`
	State     string `json:"state,omitempty"` // Asynq's: pending, scheduled, active, retry, archived, completed
	Retried   int    `json:"retried"`
	LastError string `json:"last_error,omitempty"`
	// Result is the task's result (queue.TurnResult) once the turn ended.
	Result json.RawMessage `json:"result,omitempty"`
	// Journal is the turn's record (queue.TurnRecord): every attempt, phases, timings.
	Journal *queue.TurnRecord `json:"journal,omitempty"`
}

// turnsHandler answers GET /turns/{id} with a turnView (404 when neither Asynq nor the journal
// knows the task), looking for the task in queues.
func turnsHandler(insp *asynq.Inspector, journal *queue.Journal, queues []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		v := turnView{TaskID: id}
		var info *asynq.TaskInfo
		for _, q := range queues {
			i, err := insp.GetTaskInfo(q, id)
			if err == nil {
				info = i
				break
			}
			if !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
				httpJSONError(w, http.StatusInternalServerError, "read the task: "+err.Error())
				return
			}
		}
		rec, err := journal.Get(r.Context(), id)
		switch {
		case errors.Is(err, queue.ErrNotFound):
		case err != nil:
			httpJSONError(w, http.StatusInternalServerError, "read the journal: "+err.Error())
			return
		default:
			v.Journal = rec
		}
		if info == nil && v.Journal == nil {
			httpJSONError(w, http.StatusNotFound, "no task or journal record "+id)
			return
		}
		if info != nil {
			v.Queue, v.State, v.Retried, v.LastError = info.Queue, info.State.String(), info.Retried, info.LastErr
			if len(info.Result) > 0 && json.Valid(info.Result) {
				v.Result = info.Result
				var res struct {
					Summary string `json:"summary"`
				}
				_ = json.Unmarshal(info.Result, &res)
				v.Summary = res.Summary
			}
		}
		if v.Summary == "" {
			v.Summary = turnSummary(info, v.Journal)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	})
}

// turnSummary says what a turn without a result is doing.
func turnSummary(info *asynq.TaskInfo, rec *queue.TurnRecord) string {
	if info == nil {
		s := "task no longer in Asynq (retention over)"
		if rec.Outcome != "" {
			s += "; journal outcome " + rec.Outcome
		}
		if rec.Error != "" {
			s += ": " + rec.Error
		}
		return s
	}
	switch info.State {
	case asynq.TaskStateScheduled:
		return "waiting for the turn ahead of it in its conversation (runs as soon as that turn ends)"
	case asynq.TaskStatePending:
		return "pending: runs when a worker is free"
	case asynq.TaskStateActive:
		return "running"
	case asynq.TaskStateRetry:
		return "will be tried again: " + info.LastErr
	case asynq.TaskStateArchived:
		return "failed for good: " + info.LastErr
	}
	return info.State.String()
}

func httpJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// queueNames lists the queues of a weight map, sorted.
func queueNames(qs map[string]int) []string {
	var names []string
	for n := range qs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
