package agentclient

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// stepModeStream builds a realistic step-mode stream: a ping, then steps of
// reasoning, tool call and tool return, a final reasoning + answer, the stop
// reason, usage and [DONE]. It returns the bytes and the number of events.
func stepModeStream(steps int) ([]byte, int) {
	var b strings.Builder
	n := 0
	w := func(s string) { b.WriteString("data: " + s + "\n\n"); n++ }
	const run = "run-5f0c2a8e-1b7d-4c55-9a3e-2f4b7c9d1e60"
	w(`{"message_type":"ping","id":"ping-0a1b","date":"2026-01-01T00:00:00+00:00","run_id":"` + run + `","seq_id":null}`)
	for i := 0; i < steps; i++ {
		id := fmt.Sprintf("message-3c9a1f2e-7d44-4b1a-9e5f-%012d", i)
		w(`{"id":"` + id + `","date":"2026-01-01T00:00:01.123456+00:00","name":null,"message_type":"reasoning_message","otid":"` + id + `-r","sender_id":null,"step_id":"step-1","is_err":null,"seq_id":null,"run_id":"` + run + `","source":"non_reasoner_model","reasoning":"The user asks about the weather in Paris; I should search for a current forecast before answering.","signature":null}`)
		w(`{"id":"` + id + `","date":"2026-01-01T00:00:01.123456+00:00","name":null,"message_type":"tool_call_message","otid":"` + id + `-t","sender_id":null,"step_id":"step-1","is_err":null,"seq_id":null,"run_id":"` + run + `","tool_call":{"name":"web_search","arguments":"{\"query\": \"weather Paris tomorrow\", \"num_results\": 5}","tool_call_id":"call_` + id + `"},"tool_calls":[{"name":"web_search","arguments":"{\"query\": \"weather Paris tomorrow\", \"num_results\": 5}","tool_call_id":"call_` + id + `"}]}`)
		w(`{"id":"` + id + `-ret","date":"2026-01-01T00:00:02.5+00:00","name":"web_search","message_type":"tool_return_message","otid":null,"sender_id":null,"step_id":"step-1","is_err":null,"seq_id":null,"run_id":"` + run + `","tool_return":"{\"results\": [{\"title\": \"Paris forecast\", \"snippet\": \"Mild, 14C, light rain in the afternoon\"}]}","status":"success","tool_call_id":"call_` + id + `","stdout":null,"stderr":null,"tool_returns":[{"type":"tool","tool_return":"{\"results\": []}","status":"success","tool_call_id":"call_` + id + `","stdout":null,"stderr":null}]}`)
	}
	w(`{"id":"message-final","date":"2026-01-01T00:00:03+00:00","name":null,"message_type":"assistant_message","otid":"o-a","sender_id":null,"step_id":"step-9","is_err":null,"seq_id":null,"run_id":"` + run + `","content":"Tomorrow in Paris: mild, around 14°C, with light rain in the afternoon. Take an umbrella."}`)
	w(`{"message_type":"stop_reason","stop_reason":"end_turn"}`)
	w(`{"message_type":"usage_statistics","completion_tokens":120,"prompt_tokens":3400,"total_tokens":3520,"step_count":4,"run_ids":["` + run + `"],"cached_input_tokens":null,"cache_write_tokens":null,"reasoning_tokens":null,"context_tokens":null}`)
	b.WriteString("data: [DONE]\n\n")
	n++
	return []byte(b.String()), n
}

// BenchmarkStreamParseDecode measures the whole read path (framing, JSON
// decode, state and transcript update) of a step-mode stream, reporting
// events/s and allocs/event. Baseline in the same run: BenchmarkJSONBaseline.
func BenchmarkStreamParseDecode(b *testing.B) {
	in, events := stepModeStream(10)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rd := newSSEReader(bytes.NewReader(in), 0, 0, nil)
		st := NewStreamState()
		if res, err := readEvents(rd, st, nil, nil); res != nil || err != nil {
			b.Fatal(res, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(testing.AllocsPerRun(20, func() {
		_, _ = readEvents(newSSEReader(bytes.NewReader(in), 0, 0, nil), NewStreamState(), nil, nil)
	}))/float64(events), "allocs/event")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkStreamParseDecodeStd is the baseline for the ratio: the same read
// path with every message decoded by encoding/json alone.
func BenchmarkStreamParseDecodeStd(b *testing.B) {
	in, events := stepModeStream(10)
	frames := bytes.Split(in, []byte("\n\n"))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st := NewStreamState()
		for _, f := range frames {
			d := bytes.TrimPrefix(f, []byte("data: "))
			if len(d) == 0 || string(d) == "[DONE]" {
				continue
			}
			m, err := decodeStd(d)
			if err != nil {
				b.Fatal(err)
			}
			st.Apply(m, false, timeZero)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
}
