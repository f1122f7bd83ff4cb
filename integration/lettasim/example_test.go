package lettasim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// printStream prints the content events of an SSE stream.
func printStream(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			fmt.Println("[DONE]")
			continue
		}
		var m struct {
			MessageType string `json:"message_type"`
			Content     string `json:"content"`
			StopReason  string `json:"stop_reason"`
			ToolCall    struct {
				Name string `json:"name"`
			} `json:"tool_call"`
		}
		_ = json.Unmarshal([]byte(data), &m)
		switch m.MessageType {
		case "assistant_message":
			fmt.Println("assistant:", m.Content)
		case "tool_call_message":
			fmt.Println("tool call:", m.ToolCall.Name)
		case "approval_request_message":
			fmt.Println("approval asked:", m.ToolCall.Name)
		case "approval_response_message":
			fmt.Println("approval answered")

		case "stop_reason":
			fmt.Println("stop:", m.StopReason)
		}
	}
}

// Start a server, send a turn with plain net/http, and check what the agent received.
func Example() {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	agent := srv.CreateAgent("demo", nil)

	body := `{"messages":[{"type":"message","role":"user","content":"hello","otid":"turn-1"}]}`
	resp, err := srv.Client().Post(srv.URL+"/v1/agents/"+agent+"/messages/stream", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	printStream(resp.Body)
	resp.Body.Close()

	fmt.Println("stored:", srv.CountOtid("turn-1"))
	// Output:
	// assistant: you said: hello
	// stop: end_turn
	// [DONE]
	// stored: 1
}

// A directive in the text picks the behaviour: here a tool call after 3 "minutes" of thinking
// (180ms at TimeScale 0.001), with pings flowing meanwhile.
func Example_directive() {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	agent := srv.CreateAgent("demo", nil)

	body := `{"messages":[{"role":"user","content":"[[sim think=3m tool=web_search]] what is new?"}]}`
	resp, err := srv.Client().Post(srv.URL+"/v1/agents/"+agent+"/messages/stream", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	printStream(resp.Body)
	resp.Body.Close()
	// Output:
	// tool call: web_search
	// assistant: you said: what is new?
	// stop: end_turn
	// [DONE]
}

// The server cuts the stream after two events; the run goes on and completes, and the history
// has the whole turn.
func ExampleSim_SetFault() {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	agent := srv.CreateAgent("demo", nil)
	srv.SetFault(agent, lettasim.Fault{DisconnectAfter: 2})

	body := `{"messages":[{"role":"user","content":"hi","otid":"turn-2"}]}`
	resp, err := srv.Client().Post(srv.URL+"/v1/agents/"+agent+"/messages/stream", "application/json", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println("read error:", err)

	got, _ := srv.WaitOtid(context.Background(), "turn-2")
	_ = srv.WaitRunDone(context.Background(), got.RunID)
	run, _ := srv.Run(got.RunID)
	fmt.Println("run:", run.Status, run.StopReason)
	for _, m := range srv.History(agent) {
		fmt.Println(m.Type, m.Text)
	}
	// Output:
	// read error: unexpected EOF
	// run: completed end_turn
	// user_message hi
	// reasoning_message The user wrote to me. I will answer.
	// assistant_message you said: hi
}

// Send to a conversation: its own thread of the agent, locked one run at a time. A background
// send is idempotent: the same otid again replays the run instead of starting another.
func ExampleSim_CreateConversation() {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	agent := srv.CreateAgent("demo", nil)
	conv := srv.CreateConversation(agent, "telegram:42") // or POST /v1/conversations/?agent_id=

	body := `{"messages":[{"role":"user","content":"hello","otid":"0b7c3a52-5d0e-4b8e-9a51-3f1c2d4e5f60"}],"background":true}`
	for range 2 {
		resp, err := srv.Client().Post(srv.URL+"/v1/conversations/"+conv+"/messages", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		printStream(resp.Body)
		resp.Body.Close()
	}
	msgs := srv.ConversationUserMessages(conv)
	fmt.Println("stored:", len(msgs), msgs[0].Text, "runs:", len(srv.ConversationRuns(conv)))
	// Output:
	// assistant: you said: hello
	// stop: end_turn
	// [DONE]
	// assistant: you said: hello
	// stop: end_turn
	// [DONE]
	// stored: 1 hello runs: 1
}

// A tool call that needs approval: the thread waits (a new message gets 409) until an approval
// message answers every pending call; the answer's run goes on.
func Example_approval() {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	agent := srv.CreateAgent("assistant", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "I need to send an email."},
		{Kind: lettasim.ApprovalRequest, ToolName: "send_email", Arguments: `{"to": "bob@example.com"}`},
		// What the run of an approving answer does next:
		{Kind: lettasim.Reasoning, Text: "Sent."},
		{Kind: lettasim.Assistant, Text: "I emailed Bob."},
	}})
	conv := srv.CreateConversation(agent, "")
	send := func(body string) int {
		resp, err := srv.Client().Post(srv.URL+"/v1/conversations/"+conv+"/messages", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == 200 {
			printStream(resp.Body)
		}
		return resp.StatusCode
	}
	send(`{"messages":[{"role":"user","content":"email bob"}]}`)
	p, _ := srv.PendingApproval(agent, conv)
	fmt.Println("pending:", p.Calls[0].Name)
	fmt.Println("new message:", send(`{"messages":[{"role":"user","content":"hello?"}]}`))
	send(`{"messages":[{"type":"approval","otid":"answer-1","approvals":[{"type":"approval","tool_call_id":"` +
		p.Calls[0].ID + `","approve":true}]}]}`)
	fmt.Println("stored answers:", srv.CountOtid("answer-1"))
	// Output:
	// approval asked: send_email
	// stop: requires_approval
	// [DONE]
	// pending: send_email
	// new message: 409
	// approval answered
	// assistant: I emailed Bob.
	// stop: end_turn
	// [DONE]
	// stored answers: 1
}

// askAgent is the code under test of Example_inYourTest: a function of your own that asks a
// Letta agent a question over Letta's REST API at baseURL (your Letta server's address in
// production) and returns the assistant's answer.
func askAgent(ctx context.Context, client *http.Client, baseURL, agentID, question string) (string, error) {
	body, err := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": question}}})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/agents/"+agentID+"/messages", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("letta answered %s", resp.Status)
	}
	var out struct {
		Messages []struct {
			MessageType string `json:"message_type"`
			Content     string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	for _, m := range out.Messages {
		if m.MessageType == "assistant_message" {
			return m.Content, nil
		}
	}
	return "", errors.New("no assistant message")
}

// lettasim in your own test, as httptest.NewServer is for any HTTP server: start a server,
// point the code under test at its URL, check what it got and what the agent received, and
// Close. In a test function it reads:
//
//	func TestAskAgent(t *testing.T) {
//		srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
//		defer srv.Close()
//		agent := srv.CreateAgent("support-bot", &script)
//		got, err := askAgent(t.Context(), srv.Client(), srv.URL, agent, "where is my order?")
//		if err != nil || got != "It ships on Monday." { t.Fatalf(...) }
//	}
//
// agentclient.New(agentclient.Config{BaseURL: srv.URL}) points lettaq's own client at it the
// same way.
func Example_inYourTest() {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer srv.Close()
	script := lettasim.QuickScript("It ships on Monday.")
	agent := srv.CreateAgent("support-bot", &script)
	ctx := context.Background()

	got, err := askAgent(ctx, srv.Client(), srv.URL, agent, "where is my order?")
	fmt.Printf("answer: %q, error: %v\n", got, err)

	// Letta failing before it stored anything: the code under test reports it.
	srv.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: http.StatusServiceUnavailable})
	_, err = askAgent(ctx, srv.Client(), srv.URL, agent, "hello?")
	fmt.Println("error:", err)

	// What the agent received: one user message, the refused one was not stored.
	for _, m := range srv.History(agent) {
		if m.Type == "user_message" {
			fmt.Println("stored:", m.Text)
		}
	}
	// Output:
	// answer: "It ships on Monday.", error: <nil>
	// error: letta answered 503 Service Unavailable
	// stored: where is my order?
}
