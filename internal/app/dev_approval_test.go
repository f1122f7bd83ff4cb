package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// demo-approval asks approval for send_email, and answers after the approval (or says it did
// not send it after a denial), through the simulator's approval flow.
func TestDemoApprovalAgent(t *testing.T) {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	sc := DemoScripts()[DemoAgentApproval]
	agent := srv.CreateAgent(DemoAgentApproval, &sc)
	post := func(body any) string {
		t.Helper()
		data, _ := json.Marshal(body)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/agents/"+agent+"/messages/stream", bytes.NewReader(data))
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		return string(out)
	}
	for _, approve := range []bool{true, false} {
		out := post(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "email the team"}}})
		if !strings.Contains(out, `"stop_reason":"requires_approval"`) {
			t.Fatalf("no approval request: %s", out)
		}
		p, ok := srv.PendingApproval(agent, "")
		if !ok || len(p.Calls) != 1 || p.Calls[0].Name != "send_email" {
			t.Fatalf("pending %+v", p)
		}
		out = post(map[string]any{"messages": []any{map[string]any{"type": "approval", "approvals": []any{
			map[string]any{"type": "approval", "tool_call_id": p.Calls[0].ID, "approve": approve, "reason": "not today"}}}}})
		var answer strings.Builder
		for _, line := range strings.Split(out, "\n") {
			var m struct {
				MessageType string `json:"message_type"`
				Content     string `json:"content"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &m) == nil && m.MessageType == "assistant_message" {
				answer.WriteString(m.Content)
			}
		}
		want := "Done: I emailed the team"
		if !approve {
			want = "I did not run send_email: the request was denied: not today."
		}
		if !strings.Contains(answer.String(), want) {
			t.Fatalf("approve=%v: answer %q, want %q", approve, answer.String(), want)
		}
	}
}
