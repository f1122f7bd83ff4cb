package attempt

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/record"
)

// TurnResult is what a finished turn writes as its Asynq task result
// (Inspector.GetTaskInfo(queue, id).Result), as JSON.
type TurnResult struct {
	// Summary is one line for people (the monitor shows the result raw):
	// outcome, time, attempts, the answer's start.
	Summary    string            `json:"summary"`
	TaskID     string            `json:"task_id"`
	Otid       string            `json:"otid"`
	RunID      string            `json:"run_id,omitempty"`
	Outcome    string            `json:"outcome"`
	Answer     string            `json:"answer"`
	StopReason string            `json:"stop_reason,omitempty"`
	Approval   *record.ToolEvent `json:"approval,omitempty"`
	Usage      *record.Usage     `json:"usage,omitempty"`
	Attempts   int               `json:"attempts"`
	// AnsweredBy: for a message merged into another turn (outcome
	// coalesced), that turn's task id.
	AnsweredBy string `json:"answered_by,omitempty"`
	// Merged: the task ids merged into this turn.
	Merged []string `json:"merged,omitempty"`
	// Timings in milliseconds: enqueue → first start, enqueue → first
	// answer token, enqueue → end, and this attempt's duration.
	QueueWaitMS int64 `json:"queue_wait_ms"`
	TTFTMS      int64 `json:"ttft_ms,omitempty"`
	LatencyMS   int64 `json:"latency_ms"`
	AttemptMS   int64 `json:"attempt_ms"`
}

// summaryAnswerRunes bounds the answer's part of TurnResult.Summary.
const summaryAnswerRunes = 120

// summary is TurnResult.Summary: one line an operator reads in the monitor's result column,
// e.g. "answered in 1.4s (2 attempts): you said: hi".
func (r TurnResult) summary() string {
	var b strings.Builder
	b.WriteString(r.Outcome)
	if r.LatencyMS > 0 {
		b.WriteString(" in " + (time.Duration(r.LatencyMS) * time.Millisecond).Round(100*time.Millisecond).String())
	}
	if r.Attempts > 1 {
		fmt.Fprintf(&b, " (%d attempts)", r.Attempts)
	}
	switch {
	case r.Outcome == record.OutcomeCoalesced && r.AnsweredBy != "":
		b.WriteString(": merged into turn " + r.AnsweredBy)
	case r.Approval != nil:
		b.WriteString(": waiting for approval of tool " + r.Approval.Name)
	case r.Answer != "":
		b.WriteString(": " + oneLine(r.Answer, summaryAnswerRunes))
	}
	if len(r.Merged) > 0 {
		fmt.Fprintf(&b, " (also answers %d merged message(s))", len(r.Merged))
	}
	return b.String()
}

// oneLine is s on one line (whitespace runs become one space), cut to n runes with "…".
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// appendTurnResultJSON appends r as json.Marshal writes it
// (TestTurnResultJSONMatches, FuzzTurnResultJSONMatches): a turn writes its
// result once, and json.Marshal's reflection cost the instant turn more
// than the rest of the result together.
func appendTurnResultJSON(b []byte, r *TurnResult) []byte {
	b = codec.AppendString(append(b, `{"summary":`...), r.Summary)
	b = codec.AppendString(append(b, `,"task_id":`...), r.TaskID)
	b = codec.AppendString(append(b, `,"otid":`...), r.Otid)
	b = codec.AppendStringField(b, `,"run_id":`, r.RunID)
	b = codec.AppendString(append(b, `,"outcome":`...), r.Outcome)
	b = codec.AppendString(append(b, `,"answer":`...), r.Answer)
	b = codec.AppendStringField(b, `,"stop_reason":`, r.StopReason)
	if r.Approval != nil {
		b = AppendToolEventJSON(append(b, `,"approval":`...), r.Approval)
	}
	if u := r.Usage; u != nil {
		b = journal.AppendUsageJSON(append(b, `,"usage":`...), u)
	}
	b = strconv.AppendInt(append(b, `,"attempts":`...), int64(r.Attempts), 10)
	b = codec.AppendStringField(b, `,"answered_by":`, r.AnsweredBy)
	b = codec.AppendStringsField(b, `,"merged":`, r.Merged)
	b = strconv.AppendInt(append(b, `,"queue_wait_ms":`...), r.QueueWaitMS, 10)
	b = codec.AppendIntField(b, `,"ttft_ms":`, r.TTFTMS)
	b = strconv.AppendInt(append(b, `,"latency_ms":`...), r.LatencyMS, 10)
	b = strconv.AppendInt(append(b, `,"attempt_ms":`...), r.AttemptMS, 10)
	return append(b, '}')
}

// AppendToolEventJSON appends t as json.Marshal writes it.
func AppendToolEventJSON(b []byte, t *record.ToolEvent) []byte {
	o := len(b)
	b = append(b, '{')
	b = codec.AppendStringField(b, `,"name":`, t.Name)
	b = codec.AppendStringField(b, `,"call_id":`, t.CallID)
	b = codec.AppendStringField(b, `,"arguments":`, t.Arguments)
	b = codec.AppendStringField(b, `,"status":`, t.Status)
	b = codec.AppendStringField(b, `,"return":`, t.Return)
	if t.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	return codec.CloseObject(b, o)
}
