package continuation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
)

// modelBudget is a budget short enough to run every path of budget.Paths in
// real time, long enough that scheduling noise stays well under its clocks.
func modelBudget() budget.Config {
	b := budget.Default()
	b.ConnectTimeout, b.StallTimeout, b.StreamTotal = 300*modelUnit, 200*modelUnit, 400*modelUnit
	b.ContentIdleNotice, b.StopGrace = 0, 50*modelUnit
	b.AdmissionGrace, b.ContinuationMax, b.RequestTimeout = 250*modelUnit, 500*modelUnit, 100*modelUnit
	b.PollInitial, b.PollMax = 20*modelUnit, 60*modelUnit
	b.Resume, b.Background, b.ResendPolicy = true, true, budget.ResendNever
	b.DeliveryAllowance, b.SafetyMargin = 100*modelUnit, 100*modelUnit
	return b
}

// modelUnit is the model budget's millisecond: three real ones, so that an overrun of the
// code's (a clock's worth: hundreds of units) stands well clear of a loaded machine's
// scheduling delays (slack below, in real time).
const modelUnit = 3 * time.Millisecond

// worstServer is a Letta that makes a turn take the worst case the model
// assumes: every answer comes just before the clock that waits for it
// (late by lag less than it), every stream only pings until its clocks
// end it, every run goes on forever. path decides what the send answers.
type worstServer struct {
	path budget.Path
	b    budget.Config
	otid string
}

const lag = 30 * modelUnit // how much earlier than its clock an answer comes

func (ws *worstServer) wait(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d - lag):
		return true
	case <-r.Context().Done():
		return false
	}
}

// stream writes the head and then pings (naming run-1 when named) until
// the client goes away.
func (ws *worstServer) stream(w http.ResponseWriter, r *http.Request, named bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	for seq := 1; ; seq++ {
		ping := `{"message_type":"ping","id":"ping-1","seq_id":` + fmt.Sprint(seq) + `}`
		if named {
			ping = `{"message_type":"ping","id":"ping-1","run_id":"run-1","seq_id":` + fmt.Sprint(seq) + `}`
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", ping); err != nil {
			return
		}
		f.Flush()
		select {
		case <-time.After(ws.b.StallTimeout / 4):
		case <-r.Context().Done():
			return
		}
	}
}

func (ws *worstServer) json(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (ws *worstServer) userMessage() map[string]any {
	return map[string]any{"id": "message-1", "date": time.Now().UTC().Format(time.RFC3339Nano), "message_type": "user_message",
		"otid": ws.otid, "run_id": "run-1", "content": "hi"}
}

func (ws *worstServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && (strings.HasSuffix(p, "/messages/stream") || strings.HasPrefix(p, "/v1/conversations/") && strings.HasSuffix(p, "/messages")):
		if !ws.wait(r, ws.b.ConnectTimeout) {
			return
		}
		if ws.path == budget.PathBusy {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"detail":"CONFLICT: Cannot send a new message: Another request (run_id=run-1) is currently being processed for this conversation. Please wait for it to complete.","run_id":"run-1"}`)
			return
		}
		ws.stream(w, r, ws.path != budget.PathResumeByOtid) // by otid: the stream never names its run
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/stream"): // a resume, by run or by otid
		if ws.wait(r, ws.b.ConnectTimeout) {
			ws.stream(w, r, true)
		}
	case r.Method == http.MethodGet && p == "/v1/runs/run-1":
		if ws.wait(r, ws.b.RequestTimeout) {
			ws.json(w, map[string]any{"id": "run-1", "status": "running", "background": true})
		}
	case r.Method == http.MethodGet && p == "/v1/runs/run-1/messages":
		if ws.wait(r, ws.b.RequestTimeout) {
			ws.json(w, []any{ws.userMessage()})
		}
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/messages"): // the history
		if ws.wait(r, ws.b.RequestTimeout) {
			ws.json(w, []any{ws.userMessage()})
		}
	default:
		http.NotFound(w, r)
	}
}

// The code and the model agree: down every path budget.Simulate models,
// the real Runner against a server that makes each wait as long as its
// clock allows spends no more in each part of the attempt than the model
// says (the model's thread and delivery are the queue's, not run here).
// A follow that outlives its window (a resume whose connect and
// total clocks were each clamped to the window) fails it.
func TestCodeFollowsTheBudgetModel(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: about 15 s")
	}
	const slack = 350 * time.Millisecond // scheduling and loopback on a loaded machine, per part (the overrun this guards against was ~250 units: 750 ms)
	for _, path := range budget.Paths() {
		t.Run(string(path), func(t *testing.T) {
			b := modelBudget()
			model := b.SimulatePath(path, nil)
			ws := &worstServer{path: path, b: b, otid: uuid.NewString()}
			srv := httptest.NewServer(ws)
			t.Cleanup(srv.Close)
			c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: b.RequestTimeout})
			if err != nil {
				t.Fatal(err)
			}
			r, err := continuation.New(continuation.Config{Client: c, Budget: b})
			if err != nil {
				t.Fatal(err)
			}
			tu := continuation.Turn{AgentID: "agent-1", Otid: ws.otid, Text: "hi", Started: time.Now()}
			switch path {
			case budget.PathResumeByOtid, budget.PathBusy:
				tu.ConversationID = "conv-" + uuid.NewString()
			case budget.PathApprovalAnswer:
				tu.Text = ""
				tu.Approvals = []agentclient.ApprovalAnswer{{ToolCallID: "call-1", Approve: true}}
			}
			var pc phaseClock
			h := pc.hooks()
			ctx, cancel := context.WithTimeout(context.Background(), b.TaskTimeout())
			defer cancel()
			start := time.Now()
			d := runTurn(ctx, r, tu, agentclient.NewStreamState(), h)
			end := time.Now()

			since := func(from time.Time, to time.Time) time.Duration {
				if from.IsZero() {
					return 0
				}
				return to.Sub(from)
			}
			recovering, continuing := pc.get(continuation.ActivityRecovering), pc.get(continuation.ActivityContinuing)
			type part struct {
				name        string
				real, model time.Duration
			}
			var parts []part
			follow := model.TermTotal(budget.TermContinuation)
			switch path {
			case budget.PathBusy:
				parts = []part{
					{"send (409) and the busy run's messages", since(start, continuing),
						model.TermTotal(budget.TermConnect) + model.TermTotal(budget.TermAdmission)},
					{"follow", since(continuing, end), follow},
				}
			case budget.PathResumeByOtid:
				parts = []part{
					{"send", since(start, recovering), model.TermTotal(budget.TermConnect) + model.TermTotal(budget.TermStream)},
					{"resume by otid, search, follow", since(recovering, end), model.TermTotal(budget.TermAdmission) + follow},
				}
			default:
				parts = []part{
					{"send", since(start, recovering), model.TermTotal(budget.TermConnect) + model.TermTotal(budget.TermStream)},
					{"search", since(recovering, continuing), model.TermTotal(budget.TermAdmission)},
					{"follow", since(continuing, end), follow},
				}
			}
			whole := model.Total - model.TermTotal(budget.TermThread) - model.TermTotal(budget.TermDelivery)
			parts = append(parts, part{"attempt", end.Sub(start), whole})
			for _, p := range parts {
				t.Logf("%-40s code %6v  model %6v", p.name, p.real.Round(time.Millisecond), p.model)
				if p.real > p.model+slack {
					t.Errorf("%s: the code took %v, the model allows %v", p.name, p.real.Round(time.Millisecond), p.model)
				}
			}
			if d.Outcome != continuation.StillRunning || d.Sends != 1 {
				t.Errorf("decision %v sends %d (%s): want still_running after one send", d.Outcome, d.Sends, d.Reason)
			}
		})
	}
}
