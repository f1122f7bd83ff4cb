package agentclient

import (
	"encoding/json"
	"strings"
	"testing"
)

// An approval answer and a message with images are sent as Letta's
// ApprovalCreate and MessageCreate with content parts, on both endpoint
// kinds, and conform to the schema.
func TestSendRequestApprovalAndImageBodies(t *testing.T) {
	appr := SendRequest{AgentID: testAgent, Otid: testOtid, Approvals: []ApprovalAnswer{
		{ToolCallID: "call-1", Approve: true}, {ToolCallID: "call-2", Approve: false, Reason: "not now"}}}
	img := SendRequest{AgentID: testAgent, Otid: testOtid, Text: "look", Images: []Image{
		{URL: "https://example.test/a.png"}, {MediaType: "image/png", Data: "iVBORw0KGgo="}}}
	for _, r := range []SendRequest{appr, img} {
		if err := r.validate(); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r.body())
		checkSchema(t, "LettaStreamingRequest", b)
		r.ConversationID = testConv
		cb, _ := json.Marshal(r.conversationBody())
		checkSchema(t, "ConversationMessageRequest", cb)
	}
	b, _ := json.Marshal(appr.body())
	want := `"messages":[{"type":"approval","otid":"` + testOtid + `","approvals":[{"type":"approval","tool_call_id":"call-1","approve":true},{"type":"approval","tool_call_id":"call-2","approve":false,"reason":"not now"}]}]`
	if !strings.Contains(string(b), want) {
		t.Errorf("approval body %s\nwant it to contain %s", b, want)
	}
	b, _ = json.Marshal(img.body())
	want = `"content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"url","url":"https://example.test/a.png"}},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]`
	if !strings.Contains(string(b), want) {
		t.Errorf("image body %s\nwant it to contain %s", b, want)
	}
	b, _ = json.Marshal(SendRequest{AgentID: testAgent, Otid: testOtid, Text: "hi"}.body())
	if !strings.Contains(string(b), `"content":"hi"`) {
		t.Errorf("a text-only message keeps string content: %s", b)
	}
}

func TestSendRequestInputValidation(t *testing.T) {
	for name, r := range map[string]SendRequest{
		"approval with text": {AgentID: testAgent, Otid: testOtid, Text: "x", Approvals: []ApprovalAnswer{{ToolCallID: "c"}}},
		"approval no id":     {AgentID: testAgent, Otid: testOtid, Approvals: []ApprovalAnswer{{Approve: true}}},
		"empty":              {AgentID: testAgent, Otid: testOtid},
		"image both":         {AgentID: testAgent, Otid: testOtid, Images: []Image{{URL: "u", Data: "d", MediaType: "image/png"}}},
		"image no type":      {AgentID: testAgent, Otid: testOtid, Images: []Image{{Data: "d"}}},
	} {
		if err := r.validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
	if err := (&SendRequest{AgentID: testAgent, Otid: testOtid, Images: []Image{{URL: "u"}}}).validate(); err != nil {
		t.Errorf("an image alone: %v", err)
	}
}
