package lettasim

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// This file reads a send request's messages (WIRE.md "Sending a message", "Message content"):
// user, system and assistant messages whose content is a string or a list of text and image
// parts, and the approval messages of approvals.go.

type messageCreate struct {
	Type     *string         `json:"type"`
	Role     string          `json:"role"`
	Content  json.RawMessage `json:"content"`
	Otid     string          `json:"otid"`
	SenderID string          `json:"sender_id"`
}

type inMessage struct {
	typ      partType
	text     string
	asParts  bool
	otid     string
	senderID string
	images   []json.RawMessage // a user message's image parts, as sent ({"type":"image","source":…})
	imageURL []string          // the URLs among them, which the server must fetch
	answers  []ApprovalAnswer  // an approval message's answers (typ ptApprovalResponse)
	legacy   *legacyApproval   // an approval message in the deprecated single-call form
}

// badRequest is an input error Letta answers with 400 {"detail": …} rather than a 422
// validation error: the body is well-formed but the server cannot use it.
type badRequest struct{ detail string }

func (e *badRequest) Error() string { return e.detail }

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// imageMediaTypes are the media types a base64 image may have (those the model providers
// take).
var imageMediaTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// content is a parsed message content: its text parts joined, whether it was a list of parts,
// and its image parts.
type content struct {
	text     string
	asParts  bool
	images   []json.RawMessage
	imageURL []string
}

// parseContent reads a string or a list of content parts: text parts are joined; image parts
// are checked (a 422 when the schema is not met, a 400 for a base64 image with a media type a
// model cannot take or data that is not base64) and kept. loc names the field in errors.
func parseContent(raw json.RawMessage, loc string) (content, error) {
	var c content
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return c, errors.New("content is required")
	}
	switch t[0] {
	case '"':
		if len(t) >= 2 && t[len(t)-1] == '"' && plainString(t[1:len(t)-1]) {
			c.text = string(t[1 : len(t)-1])
			return c, nil
		}
		err := json.Unmarshal(t, &c.text)
		return c, err
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(t, &items); err != nil {
			return c, err
		}
		var texts []string
		for i, raw := range items {
			at := fmt.Sprintf("%s[%d]", loc, i)
			var it struct {
				Type   string          `json:"type"`
				Text   *string         `json:"text"`
				Source json.RawMessage `json:"source"`
			}
			if err := json.Unmarshal(raw, &it); err != nil {
				return c, fmt.Errorf("%s: %v", at, err)
			}
			switch it.Type {
			case "text":
				if it.Text == nil {
					return c, fmt.Errorf("%s: text is required", at)
				}
				texts = append(texts, *it.Text)
			case "image":
				u, err := parseImageSource(it.Source, at+".source")
				if err != nil {
					return c, err
				}
				var buf bytes.Buffer
				_ = json.Compact(&buf, raw)
				c.images = append(c.images, buf.Bytes())
				if u != "" {
					c.imageURL = append(c.imageURL, u)
				}
			default:
				return c, fmt.Errorf("%s: unsupported content type %q (text or image)", at, it.Type)
			}
		}
		c.text, c.asParts = strings.Join(texts, "\n"), true
		return c, nil
	}
	return c, errors.New("content must be a string or a list of content parts")
}

// parseImageSource checks an ImageContent's source (UrlImage, Base64Image or LettaImage) and
// returns its URL for a UrlImage.
func parseImageSource(raw json.RawMessage, loc string) (string, error) {
	if isNull(raw) {
		return "", fmt.Errorf("%s: source is required", loc)
	}
	var src struct {
		Type      string  `json:"type"`
		URL       *string `json:"url"`
		MediaType *string `json:"media_type"`
		Data      *string `json:"data"`
		FileID    *string `json:"file_id"`
	}
	if err := json.Unmarshal(raw, &src); err != nil {
		return "", fmt.Errorf("%s: %v", loc, err)
	}
	switch src.Type {
	case "url":
		if src.URL == nil {
			return "", fmt.Errorf("%s.url: Field required", loc)
		}
		return *src.URL, nil
	case "base64":
		if src.MediaType == nil {
			return "", fmt.Errorf("%s.media_type: Field required", loc)
		}
		if src.Data == nil {
			return "", fmt.Errorf("%s.data: Field required", loc)
		}
		if !imageMediaTypes[*src.MediaType] {
			return "", &badRequest{fmt.Sprintf("INVALID_ARGUMENT: %s.media_type: unsupported image media type %q "+
				"(image/png, image/jpeg, image/gif or image/webp)", loc, *src.MediaType)}
		}
		if _, err := base64.StdEncoding.DecodeString(*src.Data); err != nil || *src.Data == "" {
			return "", &badRequest{fmt.Sprintf("INVALID_ARGUMENT: %s.data: image data is not valid base64", loc)}
		}
		return "", nil
	case "letta":
		if src.FileID == nil {
			return "", fmt.Errorf("%s.file_id: Field required", loc)
		}
		return "", nil
	}
	return "", fmt.Errorf("%s.type: unsupported image source type %q (url, base64 or letta)", loc, src.Type)
}

// defaultImageFetch is the Sim's rule for image URLs when Config.ImageFetch is nil (it never
// touches the network): an http(s) URL with a host is fetched, unless the host is in the
// reserved top-level domain .invalid (RFC 2606), which no resolver knows.
func defaultImageFetch(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("invalid URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("unsupported URL scheme %q", u.Scheme)
	case u.Hostname() == "":
		return errors.New("the URL has no host")
	}
	h := strings.ToLower(u.Hostname())
	if h == "invalid" || strings.HasSuffix(h, ".invalid") {
		return fmt.Errorf("could not resolve host %s: Name or service not known", u.Hostname())
	}
	return nil
}

// fetchImages fetches (by Config.ImageFetch's rule) every image URL of the request: the first
// that fails is a 400 naming it, as Letta's LettaImageFetchError. Nothing is stored then.
func (s *Sim) fetchImages(msgs []inMessage) error {
	fetch := s.cfg.ImageFetch
	if fetch == nil {
		fetch = defaultImageFetch
	}
	for _, m := range msgs {
		for _, u := range m.imageURL {
			if err := fetch(u); err != nil {
				return &badRequest{"INVALID_ARGUMENT: Failed to fetch image from " + u + ": " + err.Error()}
			}
		}
	}
	return nil
}

func parseMessages(b *sendBody) ([]inMessage, error) {
	hasMsgs, hasInput := !isNull(b.Messages), !isNull(b.Input)
	if hasMsgs == hasInput {
		return nil, errors.New("Value error, exactly one of 'messages' or 'input' must be provided")
	}
	if hasInput {
		c, err := parseContent(b.Input, "input")
		if err != nil {
			return nil, wrapInput("input", err)
		}
		return []inMessage{{typ: ptUser, text: c.text, asParts: c.asParts, otid: newUUID(),
			images: c.images, imageURL: c.imageURL}}, nil
	}
	var raws []json.RawMessage
	n := len(b.pre)
	if n == 0 {
		if err := json.Unmarshal(b.Messages, &raws); err != nil {
			return nil, fmt.Errorf("messages: %v", err)
		}
		n = len(raws)
	}
	if n == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	out := make([]inMessage, 0, n)
	for i := range n {
		var m messageCreate
		var raw json.RawMessage
		if b.pre != nil {
			raw, m = b.pre[i].raw, b.pre[i].m
		} else {
			raw = raws[i]
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("messages[%d]: %v", i, err)
			}
		}
		if m.Type != nil && (*m.Type == "approval" || *m.Type == "tool_return") {
			am, err := parseApprovalMessage(raw, *m.Type, fmt.Sprintf("messages[%d]", i))
			if err != nil {
				return nil, err
			}
			out = append(out, am)
			continue
		}
		if m.Type != nil && *m.Type != "message" {
			return nil, fmt.Errorf("messages[%d]: type %q is not supported by lettasim (message, approval or tool_return)", i, *m.Type)
		}
		var typ partType
		switch m.Role {
		case "user":
			typ = ptUser
		case "system":
			typ = ptSystem
		case "assistant":
			typ = ptAssistant
		default:
			return nil, fmt.Errorf("messages[%d]: role must be user, system or assistant", i)
		}
		c, err := parseContent(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, wrapInput(fmt.Sprintf("messages[%d]", i), err)
		}
		otid := m.Otid
		if otid == "" {
			otid = newUUID()
		}
		in := inMessage{typ: typ, text: c.text, asParts: c.asParts && typ == ptUser, otid: otid, senderID: m.SenderID}
		if typ == ptUser {
			in.images, in.imageURL = c.images, c.imageURL
		}
		out = append(out, in)
	}
	if len(out) > 1 {
		for i, m := range out {
			if m.typ == ptApprovalResponse {
				return nil, fmt.Errorf("messages[%d]: an approval message must be the only message of its request", i)
			}
		}
	}
	return out, nil
}

// wrapInput prefixes a validation error with where it happened; a badRequest passes as is.
func wrapInput(loc string, err error) error {
	var br *badRequest
	if errors.As(err, &br) || strings.HasPrefix(err.Error(), loc) {
		return err
	}
	return fmt.Errorf("%s: %v", loc, err)
}
