package lettasim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/integration/lettasim"
)

const pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

func urlImage(u string) map[string]any {
	return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": u}}
}

func b64Image(mediaType, data string) map[string]any {
	return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": mediaType, "data": data}}
}

// Image parts (a URL and base64 data) are accepted, counted in the stored message, listed
// back as schema-valid content parts, and mentioned by the echoed answer.
func TestImagesAccepted(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("images", nil)
	conv := createConv(t, srv, agent)
	tr := turnReq{Text: "what is this?", Otid: "otid-img",
		Images: []any{urlImage("https://example.com/cat.png"), b64Image("image/png", pngBase64)}}
	conformBody(t, "ConversationMessageRequest", tr.body())
	conformBody(t, "LettaStreamingRequest", tr.body())
	evs := withoutPings(convStream(t, srv, conv, tr))
	for _, e := range evs {
		conformEvent(t, e)
	}
	if ans := byType(evs, "assistant_message"); len(ans) != 1 || ans[0].str("content") != "you said: what is this? (and 2 images)" {
		t.Fatalf("answer %v", ans)
	}
	got := srv.ConversationUserMessages(conv)
	if len(got) != 1 || got[0].Images != 2 || got[0].Text != "what is this?" || srv.UserMessages(agent)[0].Images != 2 {
		t.Fatalf("received %+v", got)
	}
	var listed []map[string]any
	for _, m := range conformMessages(t, getJSON(t, srv, "/v1/conversations/"+conv+"/messages?order=asc", nil)) {
		if m["message_type"] == "user_message" {
			listed = append(listed, m)
		}
	}
	if len(listed) != 1 {
		t.Fatalf("listed %v", listed)
	}
	parts := listed[0]["content"].([]any)
	if len(parts) != 3 || parts[0].(map[string]any)["type"] != "text" ||
		parts[1].(map[string]any)["source"].(map[string]any)["url"] != "https://example.com/cat.png" ||
		parts[2].(map[string]any)["source"].(map[string]any)["media_type"] != "image/png" {
		t.Fatalf("content %v", parts)
	}
	if h := srv.ConversationHistory(conv); h[0].Images != 2 {
		t.Fatalf("history %+v", h[0])
	}
	// An image alone (no text part), through the agent endpoints and the input field.
	body := map[string]any{"input": []any{urlImage("http://example.org/a.jpg")}}
	conformBody(t, "LettaStreamingRequest", body)
	if st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages", body); st != 200 || !strings.Contains(string(data), "(and 1 image)") {
		t.Fatalf("input image: %d %s", st, data)
	}
}

// An image URL the server cannot fetch is a 400 naming the URL (Letta's
// LettaImageFetchError), and nothing is stored; Config.ImageFetch decides which URLs fail.
func TestImageFetchFails(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("images", nil)
	conv := createConv(t, srv, agent)
	for _, u := range []string{"https://cdn.example.invalid/cat.png", "ftp://example.com/cat.png", "https:///nohost.png"} {
		tr := turnReq{Text: "look", Otid: "otid-bad-img", Images: []any{urlImage(u)}}
		st, _, data := call(t, srv, "POST", convPath(conv), tr.body())
		if st != 400 || !strings.HasPrefix(detail(t, data), "INVALID_ARGUMENT: Failed to fetch image from "+u+": ") {
			t.Fatalf("%s: %d %s", u, st, data)
		}
	}
	if n := srv.CountOtid("otid-bad-img"); n != 0 || len(srv.UserMessages(agent)) != 0 || len(srv.ConversationRuns(conv)) != 0 {
		t.Fatalf("a refused image message was stored (%d)", n)
	}
	// A configured rule.
	srv2 := newServer(t, lettasim.Config{ImageFetch: func(u string) error {
		if strings.Contains(u, "private") {
			return errors.New("403 Forbidden")
		}
		return nil
	}})
	agent2 := srv2.CreateAgent("images", nil)
	tr := turnReq{Text: "look", Images: []any{urlImage("https://example.com/ok.png"), urlImage("https://example.com/private.png")}}
	st, _, data := call(t, srv2, "POST", "/v1/agents/"+agent2+"/messages/stream", tr.body())
	if st != 400 || detail(t, data) != "INVALID_ARGUMENT: Failed to fetch image from https://example.com/private.png: 403 Forbidden" {
		t.Fatalf("configured: %d %s", st, data)
	}
	tr.Images = tr.Images[:1]
	if _, evs, err := streamTurn(t, srv2, agent2, tr); err != nil || byType(evs, "assistant_message") == nil {
		t.Fatalf("the fetchable one: %v", err)
	}
}

// A base64 image with a media type a model cannot take, or data that is not base64, is a 400
// naming the field; a part that misses a required field is a 422. Nothing is stored.
func TestImageBadParts(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("images", nil)
	cases := []struct {
		img    map[string]any
		status int
		want   string
	}{
		{b64Image("text/plain", pngBase64), 400, `content[1].source.media_type: unsupported image media type "text/plain"`},
		{b64Image("image/png", "not base64!"), 400, "content[1].source.data: image data is not valid base64"},
		{b64Image("image/png", ""), 400, "content[1].source.data: image data is not valid base64"},
		{map[string]any{"type": "image", "source": map[string]any{"type": "url"}}, 422, "content[1].source.url: Field required"},
		{map[string]any{"type": "image", "source": map[string]any{"type": "base64", "data": pngBase64}}, 422, "media_type: Field required"},
		{map[string]any{"type": "image"}, 422, "source is required"},
		{map[string]any{"type": "image", "source": map[string]any{"type": "ftp"}}, 422, `unsupported image source type "ftp"`},
		{map[string]any{"type": "video"}, 422, `unsupported content type "video"`},
	}
	for _, c := range cases {
		tr := turnReq{Text: "look", Images: []any{c.img}}
		st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", tr.body())
		if st != c.status || !strings.Contains(strings.ReplaceAll(string(data), `\"`, `"`), c.want) {
			t.Errorf("%v: %d %s (want %d %q)", c.img, st, data, c.status, c.want)
		}
		if c.status == 400 && !strings.HasPrefix(detail(t, data), "INVALID_ARGUMENT: messages[0].content[1]") {
			t.Errorf("%v: %s", c.img, data)
		}
	}
	if n := len(srv.UserMessages(agent)); n != 0 {
		t.Fatalf("%d stored", n)
	}
}
