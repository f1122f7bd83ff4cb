package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
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
	// Journal is the turn's record (record.TurnRecord): every attempt, phases, timings.
	Journal *record.TurnRecord `json:"journal,omitempty"`
	// Waiting: for a turn that waits and has not started, what it waits
	// behind (its line's head, or its chat's approval request).
	Waiting *queue.WaitingTurn `json:"waiting,omitempty"`
}

// turnsHandler answers GET /turns/{id} with a turnView, looking for the task in queues. id is
// a task id, an otid or the unique beginning of either, as the monitor's ID column shows it
// (409 naming the turns when several share it; 404 when neither Asynq nor the journal knows
// the turn). A turn that waits and has no journal record yet is found through waiting (the
// parking records, the queues' scheduled and pending tasks).
func turnsHandler(insp *asynq.Inspector, journal *queue.Journal, queues []string, waiting queue.WaitingFinder) http.Handler {
	var serve func(w http.ResponseWriter, r *http.Request, id string, whole bool)
	serve = func(w http.ResponseWriter, r *http.Request, id string, whole bool) {
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
			if !whole {
				// An otid or the beginning of an id (as the monitor's ID column and the
				// journal table cut them), as enqueue journal show takes it.
				rec, err := journal.Lookup(r.Context(), id)
				var amb *queue.AmbiguousError
				switch {
				case errors.As(err, &amb):
					httpJSONError(w, http.StatusConflict, amb.Error())
					return
				case err == nil:
					serve(w, r, rec.TaskID, true)
					return
				case !errors.Is(err, queue.ErrNotFound):
					httpJSONError(w, http.StatusInternalServerError, "read the journal: "+err.Error())
					return
				}
			}
			wt, err := waiting.Find(r.Context(), id)
			var amb *queue.AmbiguousError
			switch {
			case errors.As(err, &amb):
				httpJSONError(w, http.StatusConflict, amb.Error())
				return
			case err == nil && (whole || wt.TaskID == id):
				v.Waiting, v.Queue, v.State = wt, wt.Queue, wt.Asynq
				v.Summary = waitingSummary(wt)
				writeTurnView(w, v)
				return
			case err == nil:
				serve(w, r, wt.TaskID, true)
				return
			case !errors.Is(err, queue.ErrNotFound):
				httpJSONError(w, http.StatusInternalServerError, "look for a waiting turn: "+err.Error())
				return
			}
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
		if v.Summary == "" && info != nil && (info.State == asynq.TaskStateScheduled || info.State == asynq.TaskStatePending) {
			if wt, err := waiting.Find(r.Context(), info.ID); err == nil {
				v.Waiting = wt
				if wt.Behind != "" || v.Journal == nil {
					v.Summary = waitingSummary(wt)
				}
			}
		}
		if v.Summary == "" {
			v.Summary = turnSummary(info, v.Journal)
		}
		writeTurnView(w, v)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, r.PathValue("id"), false)
	})
}

func writeTurnView(w http.ResponseWriter, v turnView) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// waitingSummary says what a waiting turn waits for.
func waitingSummary(wt *queue.WaitingTurn) string {
	s := wt.State
	if wt.Reason != "" {
		s += ": " + wt.Reason
	}
	if !wt.Since.IsZero() {
		s += fmt.Sprintf(" (for %s)", time.Since(wt.Since).Round(time.Second))
	}
	if wt.Behind != "" {
		s += "; runs as soon as that ends"
	}
	return s
}

// turnSummary says what a turn without a result is doing.
func turnSummary(info *asynq.TaskInfo, rec *record.TurnRecord) string {
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
	if wt := openWait(rec); wt != nil && info.State != asynq.TaskStateActive {
		return fmt.Sprintf("waiting behind %s: %s (for %s)", wt.Behind, wt.Reason, time.Since(wt.From).Round(time.Second))
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

// openWait is the record's wait that has not ended, nil when none.
func openWait(rec *record.TurnRecord) *record.Wait {
	if rec == nil || len(rec.Waits) == 0 || !rec.Waits[len(rec.Waits)-1].Until.IsZero() {
		return nil
	}
	return &rec.Waits[len(rec.Waits)-1]
}
