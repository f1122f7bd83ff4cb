package agentclient

import (
	"errors"
	"fmt"
)

// What a send carries besides plain text: the answer to an approval
// request, and images next to the text (WIRE.md "Approvals", "Message
// content").

// ApprovalAnswer answers one pending tool call of an approval request
// (Letta's ApprovalReturn).
type ApprovalAnswer struct {
	ToolCallID string
	Approve    bool
	// Reason is told to the model (for a denial above all). Optional.
	Reason string
}

// Image is one image part of a user message: a URL, or base64 Data with
// its MediaType (e.g. "image/png").
type Image struct {
	URL       string
	MediaType string
	Data      string
}

// approvalCreate is Letta's ApprovalCreate.
type approvalCreate struct {
	Type      string           `json:"type"`
	Otid      string           `json:"otid"`
	Approvals []approvalReturn `json:"approvals"`
}

// approvalReturn is Letta's ApprovalReturn.
type approvalReturn struct {
	Type       string `json:"type"`
	ToolCallID string `json:"tool_call_id"`
	Approve    bool   `json:"approve"`
	Reason     string `json:"reason,omitempty"`
}

// contentPart is a TextContent or an ImageContent.
type contentPart struct {
	Type   string       `json:"type"`
	Text   *string      `json:"text,omitempty"`
	Source *imageSource `json:"source,omitempty"`
}

// imageSource is a UrlImage or a Base64Image.
type imageSource struct {
	Type      string `json:"type"`
	URL       string `json:"url,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
}

// messages returns the request's messages: one ApprovalCreate when it
// answers an approval request, else one user MessageCreate whose content
// is the text, or a list of parts when images come with it.
func (r SendRequest) messages() []any {
	if len(r.Approvals) > 0 {
		m := approvalCreate{Type: "approval", Otid: r.Otid}
		for _, a := range r.Approvals {
			m.Approvals = append(m.Approvals, approvalReturn{Type: "approval", ToolCallID: a.ToolCallID, Approve: a.Approve, Reason: a.Reason})
		}
		return []any{m}
	}
	if len(r.Images) == 0 {
		return []any{messageCreate{Type: "message", Role: "user", Content: r.Text, Otid: r.Otid, SenderID: r.SenderID}}
	}
	parts := make([]contentPart, 0, len(r.Images)+1)
	if r.Text != "" {
		text := r.Text
		parts = append(parts, contentPart{Type: "text", Text: &text})
	}
	for _, im := range r.Images {
		src := &imageSource{Type: "url", URL: im.URL}
		if im.URL == "" {
			src = &imageSource{Type: "base64", MediaType: im.MediaType, Data: im.Data}
		}
		parts = append(parts, contentPart{Type: "image", Source: src})
	}
	return []any{messageCreate{Type: "message", Role: "user", Content: parts, Otid: r.Otid, SenderID: r.SenderID}}
}

// validateInput checks what the request carries: text, images, or an
// approval answer (then neither text nor images).
func (r SendRequest) validateInput() error {
	if len(r.Approvals) > 0 {
		if r.Text != "" || len(r.Images) > 0 {
			return errors.New("agentclient: SendRequest answers an approval: it carries no text or images")
		}
		for i, a := range r.Approvals {
			if a.ToolCallID == "" {
				return fmt.Errorf("agentclient: SendRequest.Approvals[%d].ToolCallID is empty", i)
			}
		}
		return nil
	}
	if r.Text == "" && len(r.Images) == 0 {
		return errors.New("agentclient: SendRequest.Text is empty")
	}
	for i, im := range r.Images {
		if (im.URL == "") == (im.Data == "") {
			return fmt.Errorf("agentclient: SendRequest.Images[%d]: set URL or Data, not both", i)
		}
		if im.Data != "" && im.MediaType == "" {
			return fmt.Errorf("agentclient: SendRequest.Images[%d].MediaType is empty", i)
		}
	}
	return nil
}
