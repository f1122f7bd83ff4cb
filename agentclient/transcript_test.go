package agentclient

import (
	"testing"
)

func applyAll(t *testing.T, tr *Transcript, complete bool, fx ...string) []Update {
	t.Helper()
	var us []Update
	for _, f := range fx {
		us = append(us, tr.Apply(mustDecode(t, f), complete))
	}
	return us
}

func TestTranscriptStepMode(t *testing.T) {
	var tr Transcript
	applyAll(t, &tr, false, fxPing, fxReasoning, fxToolCall, fxToolReturn, fxAssistant, fxStop, fxUsage)
	kinds := []StepKind{StepReasoning, StepToolCall, StepToolReturn, StepAssistant}
	if len(tr.Steps) != len(kinds) {
		t.Fatalf("steps = %+v", tr.Steps)
	}
	for i, k := range kinds {
		if tr.Steps[i].Kind != k {
			t.Errorf("step %d kind %s, want %s", i, tr.Steps[i].Kind, k)
		}
	}
	// Reasoning and the tool call share an id; the return has its own and
	// pairs with its call by tool_call_id.
	if tr.Steps[0].MessageID != tr.Steps[1].MessageID || tr.Steps[2].MessageID == tr.Steps[1].MessageID {
		t.Error("grouping by id is wrong")
	}
	if r := tr.Steps[2]; r.ToolName != "web_search" || r.Status != "success" || r.ToolReturn != "results" || r.ToolCallID != "call-1" {
		t.Errorf("tool return step: %+v", r)
	}
	if tr.Answer() != "Here you go" || tr.StopReason != "end_turn" || tr.Usage == nil || tr.Usage.TotalTokens != 312 {
		t.Errorf("answer %q stop %q usage %+v", tr.Answer(), tr.StopReason, tr.Usage)
	}
	if len(tr.UnansweredToolCalls()) != 0 {
		t.Error("the call was answered")
	}
}

func TestTranscriptTokenDeltas(t *testing.T) {
	var tr Transcript
	a := func(text string) string {
		return `{"id":"message-x","date":"2026-01-01T00:00:00+00:00","message_type":"assistant_message","run_id":"run-1","content":` + text + `}`
	}
	r := func(id, text string) string {
		return `{"id":"` + id + `","date":"2026-01-01T00:00:00+00:00","message_type":"reasoning_message","run_id":"run-1","reasoning":"` + text + `"}`
	}
	us := applyAll(t, &tr, false, r("message-x", "think"), r("message-x", "ing"), fxDelta1, fxDelta2, fxDelta3,
		a(`"Hel"`), a(`"lo"`), a(`""`), a(`[{"type":"text","text":" world"}]`), a(`null`))
	if got := tr.Answer(); got != "Hello world" {
		t.Errorf("answer = %q", got)
	}
	if tr.Steps[0].Text != "thinking" {
		t.Errorf("reasoning = %q", tr.Steps[0].Text)
	}
	call := tr.Steps[1]
	if call.Kind != StepToolCall || call.ToolName != "web_search" || call.Arguments != `{"q":"go"}` || call.ToolCallID != "call-7" {
		t.Errorf("tool call deltas joined: %+v", call)
	}
	if !us[0].New || us[1].New || us[1].Delta != "ing" {
		t.Errorf("updates: %+v %+v", us[0], us[1])
	}
	// A new reasoning id starts a new group.
	applyAll(t, &tr, false, r("message-y", "again"))
	if last := tr.Steps[len(tr.Steps)-1]; last.MessageID != "message-y" || last.Text != "again" {
		t.Errorf("new group: %+v", last)
	}
	if n := len(tr.UnansweredToolCalls()); n != 1 {
		t.Errorf("unanswered calls = %d, want 1", n)
	}
}

func TestTranscriptCompleteMessagesReplaceNotDuplicate(t *testing.T) {
	var tr Transcript
	partial := `{"id":"message-c3","date":"2026-01-01T00:00:03+00:00","message_type":"assistant_message","run_id":"run-1","content":"Here"}`
	applyAll(t, &tr, false, fxReasoning, fxToolCall, partial)
	// A poll returns the same messages complete: nothing is duplicated,
	// and the assistant text grows to the stored version.
	us := applyAll(t, &tr, true, fxReasoning, fxToolCall, fxToolReturn, fxAssistant)
	if len(tr.Steps) != 4 {
		t.Fatalf("steps = %d, want 4: %+v", len(tr.Steps), tr.Steps)
	}
	if tr.Answer() != "Here you go" || us[3].Delta != " you go" || us[3].New {
		t.Errorf("answer %q update %+v", tr.Answer(), us[3])
	}
	// An empty complete message never erases content.
	applyAll(t, &tr, true, `{"id":"message-c3","date":"2026-01-01T00:00:03+00:00","message_type":"assistant_message","run_id":"run-1","content":""}`)
	if tr.Answer() != "Here you go" {
		t.Errorf("empty terminator erased content: %q", tr.Answer())
	}
}

func TestTranscriptDuplicateToolCallID(t *testing.T) {
	var tr Transcript
	other := `{"id":"message-zz","date":"2026-01-01T00:00:01+00:00","message_type":"tool_call_message","run_id":"run-1","tool_call":{"name":"web_search","arguments":"{}","tool_call_id":"call-1"}}`
	applyAll(t, &tr, false, fxToolCall, other)
	if d := tr.DuplicateToolCallIDs(); len(d) != 1 || d[0] != "call-1" {
		t.Errorf("duplicates = %v", d)
	}
}

func TestStreamStateSeqAndRun(t *testing.T) {
	st := NewStreamState()
	st.Apply(mustDecode(t, fxAssistList), false, timeZero)
	if seq, ok := st.LastSeq(); !ok || seq != 4 || st.RunID() != "run-1" {
		t.Errorf("seq %d %v run %q", seq, ok, st.RunID())
	}
	st.Apply(mustDecode(t, fxErrorMsg), false, timeZero)
	if seq, _ := st.LastSeq(); seq != 9 {
		t.Errorf("seq after error message = %d", seq)
	}
	if st.Snapshot().Error == nil {
		t.Error("error message not kept in state")
	}
}
