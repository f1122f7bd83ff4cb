package agentclient

import (
	"testing"
)

// Fixtures written from WIRE.md: field order, nulls written out, the odd ones.
const (
	fxPing       = `{"message_type":"ping","id":"ping-2b0f","date":"2026-01-01T00:00:00+00:00","run_id":"run-11111111-aaaa","seq_id":null}`
	fxReasoning  = `{"id":"message-a1","date":"2026-01-01T00:00:01+00:00","name":null,"message_type":"reasoning_message","otid":"o-r","sender_id":null,"step_id":"step-1","is_err":null,"seq_id":null,"run_id":"run-11111111-aaaa","source":"non_reasoner_model","reasoning":"Let me look","signature":null}`
	fxToolCall   = `{"id":"message-a1","date":"2026-01-01T00:00:01+00:00","name":null,"message_type":"tool_call_message","otid":"o-t","sender_id":null,"step_id":"step-1","is_err":null,"seq_id":null,"run_id":"run-11111111-aaaa","tool_call":{"name":"web_search","arguments":"{\"q\":\"go\"}","tool_call_id":"call-1"},"tool_calls":[{"name":"web_search","arguments":"{\"q\":\"go\"}","tool_call_id":"call-1"}]}`
	fxToolReturn = `{"id":"message-b2","date":"2026-01-01T00:00:02+00:00","name":"web_search","message_type":"tool_return_message","otid":null,"sender_id":null,"step_id":"step-1","is_err":null,"seq_id":null,"run_id":"run-11111111-aaaa","tool_return":"results","status":"success","tool_call_id":"call-1","stdout":null,"stderr":null,"tool_returns":[{"type":"tool","tool_return":"results","status":"success","tool_call_id":"call-1","stdout":null,"stderr":null}]}`
	fxAssistant  = `{"id":"message-c3","date":"2026-01-01T00:00:03+00:00","name":null,"message_type":"assistant_message","otid":"o-a","sender_id":null,"step_id":"step-2","is_err":null,"seq_id":null,"run_id":"run-11111111-aaaa","content":"Here you go"}`
	fxAssistList = `{"id":"message-c4","date":"2026-01-01T00:00:03+00:00","name":null,"message_type":"assistant_message","otid":null,"sender_id":null,"step_id":null,"is_err":null,"seq_id":4,"run_id":"run-1","content":[{"type":"text","text":"part one, "},{"type":"text","text":"part two"}]}`
	fxStop       = `{"message_type":"stop_reason","stop_reason":"end_turn"}`
	fxStopSpaced = `{"message_type": "stop_reason", "stop_reason": "cancelled"}`
	fxUsage      = `{"message_type":"usage_statistics","completion_tokens":12,"prompt_tokens":300,"total_tokens":312,"step_count":2,"run_ids":["run-11111111-aaaa"],"cached_input_tokens":null,"cache_write_tokens":null,"reasoning_tokens":5,"context_tokens":null}`
	fxErrorMsg   = `{"message_type":"error_message","run_id":"run-1","error_type":"llm_timeout","message":"The LLM timed out","detail":"upstream 504","seq_id":9}`
	fxBareError  = `{"error":"Unhandled exception","code":"INTERNAL_SERVER_ERROR"}`
	fxUnknown    = `{"id":"message-z","date":"2026-01-01T00:00:03+00:00","message_type":"summary_message","run_id":"run-1","summary":"…"}`
	fxHidden     = `{"id":"message-h","date":"2026-01-01T00:00:03+00:00","message_type":"hidden_reasoning_message","state":"redacted","hidden_reasoning":null,"run_id":"run-1"}`
	fxUser       = `{"id":"message-u","date":"2026-01-01T00:00:00+00:00","name":null,"message_type":"user_message","otid":"otid-123","sender_id":"user-9","step_id":null,"is_err":null,"seq_id":null,"run_id":"run-1","content":[{"type":"text","text":"hello"}]}`
	fxApproval   = `{"id":"message-p","date":"2026-01-01T00:00:03+00:00","message_type":"approval_request_message","run_id":"run-1","tool_call":{"name":"delete_file","arguments":"{}","tool_call_id":"call-9"},"tool_calls":null}`
	// Token-mode tool call deltas: null keys dropped.
	fxDelta1 = `{"id":"message-d","date":"2026-01-01T00:00:01+00:00","message_type":"tool_call_message","run_id":"run-1","tool_call":{"name":"web_search","tool_call_id":"call-7"},"tool_calls":{"name":"web_search","tool_call_id":"call-7"}}`
	fxDelta2 = `{"id":"message-d","date":"2026-01-01T00:00:01+00:00","message_type":"tool_call_message","run_id":"run-1","tool_call":{"arguments":"{\"q\":","tool_call_id":"call-7"},"tool_calls":{"arguments":"{\"q\":","tool_call_id":"call-7"}}`
	fxDelta3 = `{"id":"message-d","date":"2026-01-01T00:00:01+00:00","message_type":"tool_call_message","run_id":"run-1","tool_call":{"arguments":"\"go\"}","tool_call_id":"call-7"},"tool_calls":{"arguments":"\"go\"}","tool_call_id":"call-7"}}`
)

func mustDecode(t *testing.T, s string) Message {
	t.Helper()
	m, err := DecodeMessage([]byte(s))
	if err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return m
}

func TestDecodeEveryType(t *testing.T) {
	if m := mustDecode(t, fxPing).(*Ping); m.RunID != "run-11111111-aaaa" || m.SeqID != nil {
		t.Errorf("ping: %+v", m)
	}
	if m := mustDecode(t, fxReasoning).(*ReasoningMessage); m.Reasoning != "Let me look" || m.Otid != "o-r" || m.StepID != "step-1" || m.Name != "" {
		t.Errorf("reasoning: %+v", m)
	}
	tc := mustDecode(t, fxToolCall).(*ToolCallMessage)
	if c := tc.Calls(); len(c) != 1 || c[0].Name != "web_search" || c[0].ToolCallID != "call-1" || c[0].Arguments != `{"q":"go"}` {
		t.Errorf("tool call: %+v", c)
	}
	tr := mustDecode(t, fxToolReturn).(*ToolReturnMessage)
	if tr.ToolReturn != "results" || tr.Status != "success" || tr.ToolCallID != "call-1" || len(tr.ToolReturns) != 1 || tr.Name != "web_search" {
		t.Errorf("tool return: %+v", tr)
	}
	if m := mustDecode(t, fxAssistant).(*AssistantMessage); m.Content.Text != "Here you go" || m.Content.Parts != nil {
		t.Errorf("assistant: %+v", m)
	}
	al := mustDecode(t, fxAssistList).(*AssistantMessage)
	if al.Content.Text != "part one, part two" || len(al.Content.Parts) != 2 || al.SeqID == nil || *al.SeqID != 4 {
		t.Errorf("assistant list content: %+v", al)
	}
	if m := mustDecode(t, fxStop).(*StopReason); m.StopReason != "end_turn" {
		t.Errorf("stop: %+v", m)
	}
	if m := mustDecode(t, fxStopSpaced).(*StopReason); m.StopReason != "cancelled" {
		t.Errorf("stop with spaces: %+v", m)
	}
	u := mustDecode(t, fxUsage).(*Usage)
	if u.TotalTokens != 312 || u.StepCount != 2 || u.ReasoningTokens != 5 || u.CachedInputTokens != 0 || len(u.RunIDs) != 1 {
		t.Errorf("usage: %+v", u)
	}
	em := mustDecode(t, fxErrorMsg).(*ErrorMessage)
	if em.ErrorType != "llm_timeout" || em.Message != "The LLM timed out" || em.Detail != "upstream 504" || em.RunID != "run-1" {
		t.Errorf("error message: %+v", em)
	}
	be := mustDecode(t, fxBareError).(*ErrorMessage)
	if be.ErrorType != "INTERNAL_SERVER_ERROR" || be.Message != "Unhandled exception" || be.MessageType != "" {
		t.Errorf("bare error: %+v", be)
	}
	if m := mustDecode(t, fxUnknown).(*UnknownMessage); m.MessageType != "summary_message" || len(m.Raw) == 0 {
		t.Errorf("unknown: %+v", m)
	}
	if m := mustDecode(t, fxHidden).(*HiddenReasoningMessage); m.State != "redacted" {
		t.Errorf("hidden: %+v", m)
	}
	if m := mustDecode(t, fxUser).(*UserMessage); m.Otid != "otid-123" || m.Content.Text != "hello" || m.SenderID != "user-9" {
		t.Errorf("user: %+v", m)
	}
	ap := mustDecode(t, fxApproval).(*ApprovalRequestMessage)
	if c := ap.Calls(); len(c) != 1 || c[0].Name != "delete_file" {
		t.Errorf("approval: %+v", c)
	}
	d := mustDecode(t, fxDelta2).(*ToolCallMessage)
	if c := d.Calls(); len(c) != 1 || c[0].Name != "" || c[0].Arguments != `{"q":` {
		t.Errorf("delta: %+v", c)
	}
	if _, err := DecodeMessage([]byte(`{"message_type":`)); err == nil {
		t.Error("malformed JSON must be an error")
	}
	if _, err := DecodeMessage([]byte(`{"message_type":"assistant_message","content":7}`)); err == nil {
		t.Error("content of the wrong type must be an error")
	}
}
