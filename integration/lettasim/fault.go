package lettasim

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// Forever, as a Fault duration (StallFor, FirstByteDelay, AdmitDelay), means "until the client
// goes away or the Sim closes".
const Forever time.Duration = -1

// Fault is what goes wrong with a turn. Set it with Sim.SetFault (it applies to the next turn of
// that agent, or to the next Times turns, or to every turn if Persistent) or with a [[sim ...]]
// directive in the message text. Durations are multiplied by Config.TimeScale.
//
// The phases of a send, in order, and the fields that act on each:
//
//	AdmitDelay                      nothing sent, nothing stored yet
//	Status429 / Deploy503 / Busy / PendingApproval / Status5xxBeforeStore  answered, nothing stored
//	-- the user message is stored, the run starts (and from here on always runs to its end) --
//	Status5xxAfterStore / BusyAfterStore / DropBeforeResponse
//	FirstByteDelay                  no bytes at all (not even headers)
//	stream: StallAfter+StallFor, DisconnectAfter   (connection faults; the run is not affected)
//	run: EndWith after EndAfter steps, UnhandledException
//	resume: ResumeStatus
type Fault struct {
	// Times is how many turns the fault applies to (0 means 1). Persistent: every turn until
	// SetFault or ClearFault replaces it.
	Times      int
	Persistent bool

	// AdmitDelay holds the request before the message is stored (no bytes are sent). A client
	// that gives up during it leaves nothing behind.
	AdmitDelay time.Duration

	// Status429 answers 429 {"detail": ...} with a Retry-After header of RetryAfter (scaled,
	// whole seconds rounded down, default 1s before scaling): Letta's own API rate limit.
	// Status429Code picks another 429 of Letta Cloud's (WIRE.md, "Errors Letta Cloud returns
	// today"): "llm_rate_limit" answers the model's rate limit {"error": {"type":
	// "llm_rate_limit", ...}} without Retry-After; an account limit ("not-enough-credits",
	// "agents-limit-exceeded", "exceeded-quota", "<x>-usage-exceeded") answers {"errorCode":
	// code, "detail": "<code>: ..."} without Retry-After. Nothing is stored.
	Status429     bool
	Status429Code string
	RetryAfter    time.Duration

	// Deploy503 answers 503 {"errorCode": "cloud_api_shutting_down", "message": ...,
	// "admitted": false, "retryable": true} with a Retry-After of RetryAfter (as Status429),
	// Letta Cloud's answer while it deploys. Nothing is stored.
	Deploy503 bool

	// Busy answers 409 "conversation busy" naming a run (the agent's newest, or a made-up id
	// when it has none), as Config.OneRunPerAgent does for a real overlap. Nothing is stored.
	Busy bool
	// BusyAfterStore stores the message and starts its run, then answers the send 409 busy
	// (on a conversation, in the form BusyForm says): the thread is held by the turn's own run,
	// as when a send of the same otid loses the race for the lock to its own first send.
	BusyAfterStore bool
	// BusyForm, on a conversation, is the form of this send's 409 busy answers (a real lock's,
	// Busy's, BusyAfterStore's), as the busy_form directive: "detail" (the server's, with
	// run_id), "hosted" ({"error": "Conversation <id> is busy with another active run."}),
	// "newer" ({"error": "Conversation is busy with another active run."}, no run id) or
	// "nested" ({"error": {"error": "Conversation is busy with another active run."}}).
	BusyForm string

	// PendingApproval answers 409 as a thread waiting for a tool call's approval does
	// ({"detail": "CONFLICT: Cannot send a new message: The agent is waiting for approval on a
	// tool call. …"}), on the agent and the conversation endpoints alike. Nothing is stored.
	PendingApproval bool

	// Status5xxBeforeStore answers this status (e.g. 500, 502, 503) before storing anything.
	Status5xxBeforeStore int
	// Status5xxAfterStore stores the message and starts the run (which goes on to its end), then
	// answers this status.
	Status5xxAfterStore int
	// DropBeforeResponse stores the message and starts the run, then closes the connection with
	// no response at all.
	DropBeforeResponse bool

	// FirstByteDelay: the message is stored and the run is going, but no byte (not even the
	// response headers) is written for this long.
	FirstByteDelay time.Duration

	// StallFor != 0 stalls the connection after StallAfter SSE events (0: right after the
	// response headers): no bytes, no pings, for StallFor (or Forever). The run goes on; after
	// a finite stall the stream catches up.
	StallAfter int
	StallFor   time.Duration

	// DisconnectAfter > 0 cuts the connection abruptly (no terminating chunk: the client sees
	// an unexpected EOF) after that many SSE events, pings included. The run goes on.
	DisconnectAfter int

	// EndWith ends the run with this stop reason after EndAfter script steps (negative: after
	// all of them). Failing reasons (error, llm_api_error, ...) send stop_reason then
	// "event: error" with an error_message of ErrorType and no [DONE]; "cancelled" sends the
	// cancelled stop reason then [DONE]; completing reasons (max_steps, ...) end normally.
	EndWith   string
	EndAfter  int
	ErrorType string
	// UnhandledException ends the run (after EndAfter steps) as failed with stop reason "error",
	// and the stream with event: error {"error": ..., "code": "INTERNAL_SERVER_ERROR"} only.
	UnhandledException bool

	// ResumeStatus makes POST /v1/runs/{id}/stream for this turn's run answer this status
	// (400, 410 or 503) instead of resuming.
	ResumeStatus int
	// IgnoreStartingAfter makes every resume of this turn's run (the run's stream endpoint,
	// or the conversation's) replay the run's stream from its start, whatever starting_after
	// asked for: chunks the client has already come again.
	IgnoreStartingAfter bool
}

// String lists the fields that are set, e.g. "Fault{DisconnectAfter:3 StallFor:60s}".
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString("Fault{")
	v := reflect.ValueOf(f)
	n := 0
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			continue
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		n++
		fmt.Fprintf(&b, "%s:%v", v.Type().Field(i).Name, v.Field(i).Interface())
	}
	b.WriteByte('}')
	return b.String()
}

func (f Fault) isZero() bool {
	return f.AdmitDelay == 0 && !f.Status429 && f.Status429Code == "" && !f.Deploy503 && !f.Busy && !f.BusyAfterStore && f.BusyForm == "" && !f.PendingApproval && f.RetryAfter == 0 && f.Status5xxBeforeStore == 0 &&
		f.Status5xxAfterStore == 0 && !f.DropBeforeResponse && f.FirstByteDelay == 0 &&
		f.StallFor == 0 && f.StallAfter == 0 && f.DisconnectAfter == 0 && f.EndWith == "" &&
		f.EndAfter == 0 && f.ErrorType == "" && !f.UnhandledException && f.ResumeStatus == 0 && !f.IgnoreStartingAfter
}

// ListFault slows or fails the read endpoints of an agent: GET .../agents/{id}/messages,
// GET /v1/runs/{id}, GET /v1/runs/{id}/messages and GET /v1/runs/?agent_id=. Set it with
// Sim.SetListFault or the slow_list= / fail_list= directive keys.
type ListFault struct {
	// Delay before each answer (scaled by TimeScale).
	Delay time.Duration
	// Fail: the next Fail requests answer FailStatus (default 503) {"detail": ...}.
	Fail       int
	FailStatus int
	// IgnoreAfter makes the message lists (the agent's, a conversation's, a run's) answer
	// every page as the first: the after cursor is ignored (a cursor that does not exist is
	// no 404 either).
	IgnoreAfter bool
	// ReverseOrder lists the rows of each message page in the order opposite to the one
	// asked for (WIRE.md: the order inside a page is not reliable); the messages of one row
	// (a reasoning and its tool call or text, sharing an id) keep their order.
	ReverseOrder bool
}

type faultSlot struct {
	f         Fault
	remaining int // -1: persistent
}

// stop reasons and the run status they map to (WIRE.md).
var stopReasonStatus = map[string]string{
	"end_turn":             "completed",
	"max_steps":            "completed",
	"tool_rule":            "completed",
	"requires_approval":    "completed",
	"error":                "failed",
	"llm_api_error":        "failed",
	"invalid_llm_response": "failed",
	"invalid_tool_call":    "failed",
	"no_tool_call":         "failed",
	"max_tokens_exceeded":  "failed",
	"context_window_overflow_in_system_prompt": "failed",
	"insufficient_credits":                     "failed",
	"cancelled":                                "cancelled",
}

func validStopReason(s string) bool { _, ok := stopReasonStatus[s]; return ok }

func isFailure(stop string) bool { return stopReasonStatus[stop] == "failed" }

// runStatusFor maps a stop reason to the run status; async runs report completed for anything
// but cancelled (WIRE.md).
func runStatusFor(stop string, async bool) string {
	st := stopReasonStatus[stop]
	if st == "" {
		st = "failed"
	}
	if async && st == "failed" {
		return "completed"
	}
	return st
}

func defaultErrorType(stop string) string {
	switch stop {
	case "llm_api_error":
		return "llm_error"
	case "invalid_llm_response":
		return "llm_empty_response"
	case "context_window_overflow_in_system_prompt", "max_tokens_exceeded":
		return "context_window_exceeded"
	}
	return "internal_error"
}

// scale multiplies a scripted duration by the time scale; Forever and non-positive values pass.
func scaleDuration(d time.Duration, scale float64) time.Duration {
	if d <= 0 || scale == 1 {
		return d
	}
	f := float64(d) * scale
	if f >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	if f < 1 {
		return 1
	}
	return time.Duration(f)
}
