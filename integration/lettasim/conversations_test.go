package lettasim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// convPath is the send path of a conversation ("conv-…", "default" or an agent id).
func convPath(id string) string { return "/v1/conversations/" + id + "/messages" }

// convOpen posts a send and returns the response (status checked by the caller).
func convOpen(t *testing.T, srv *lettasim.Server, id string, tr turnReq) *http.Response {
	t.Helper()
	return do(t, srv, "POST", convPath(id), tr.body(), nil)
}

// convStream posts a streaming send, wants 200, and reads the whole stream.
func convStream(t *testing.T, srv *lettasim.Server, id string, tr turnReq) []event {
	t.Helper()
	resp := convOpen(t, srv, id, tr)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("send to %s: %d %s", id, resp.StatusCode, data)
	}
	evs, err := newSSE(t, resp.Body).all()
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// holdLock starts a send whose run thinks for a long time (cancelled when the test ends) and
// returns its run id once the stream's first ping has named it: the lock is held from then on.
func holdLock(t *testing.T, srv *lettasim.Server, id string, tr turnReq) string {
	t.Helper()
	tr.Text = "[[sim think=100h]] " + tr.Text
	resp := convOpen(t, srv, id, tr)
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("holder: %d %s", resp.StatusCode, data)
	}
	t.Cleanup(func() { resp.Body.Close() })
	ev, err := newSSE(t, resp.Body).next()
	if err != nil || ev.typ() != "ping" || ev.str("run_id") == "" {
		t.Fatalf("holder's first event %v %v", ev, err)
	}
	runID := ev.str("run_id")
	t.Cleanup(func() { srv.Cancel(testCtx(t), runID) })
	return runID
}

// busyRunID asserts a 409 busy answer in the server's form and returns its run_id.
func busyRunID(t *testing.T, st int, data []byte) string {
	t.Helper()
	var b struct {
		Detail string `json:"detail"`
		RunID  string `json:"run_id"`
	}
	if st != 409 || json.Unmarshal(data, &b) != nil {
		t.Fatalf("want 409 busy, got %d %s", st, data)
	}
	want := "CONFLICT: Cannot send a new message: Another request (run_id=" + b.RunID + ") is currently being processed for this conversation. Please wait for it to complete."
	if b.Detail != want || !strings.HasPrefix(b.RunID, "run-") {
		t.Fatalf("busy body %s", data)
	}
	return b.RunID
}

func TestConversationCreateGetList(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	a1 := srv.CreateAgent("one", nil)
	a2 := srv.CreateAgent("two", nil)
	mk := func(agent, body string) map[string]any {
		st, _, data := call(t, srv, "POST", "/v1/conversations/?agent_id="+agent, body)
		if st != 200 {
			t.Fatalf("create: %d %s", st, data)
		}
		conform(t, "Conversation", data)
		var c map[string]any
		_ = json.Unmarshal(data, &c)
		return c
	}
	c1 := mk(a1, `{"summary": "lettaq:telegram:42"}`)
	c2 := mk(a1, `{}`)
	c3 := mk(a1, `{"summary": "lettaq:slack:C1"}`)
	c4 := mk(a2, `{"summary": "lettaq:telegram:42"}`)
	if !lettasim.ValidConversationID(c1["id"].(string)) || c1["agent_id"] != a1 || c1["summary"] != "lettaq:telegram:42" || c2["summary"] != nil {
		t.Fatalf("created %v %v", c1, c2)
	}
	var got map[string]any
	getJSON(t, srv, "/v1/conversations/"+c3["id"].(string), &got)
	if got["id"] != c3["id"] || got["summary"] != "lettaq:slack:C1" {
		t.Fatalf("get %v", got)
	}
	ids := func(q string) []string {
		var list []map[string]any
		data := getJSON(t, srv, "/v1/conversations/"+q, &list)
		var raw []json.RawMessage
		_ = json.Unmarshal(data, &raw)
		for _, r := range raw {
			conform(t, "Conversation", r)
		}
		var out []string
		for _, c := range list {
			out = append(out, c["id"].(string))
		}
		return out
	}
	id := func(c map[string]any) string { return c["id"].(string) }
	cases := []struct {
		q    string
		want []string
	}{
		{"?agent_id=" + a1, []string{id(c3), id(c2), id(c1)}}, // newest first by default
		{"?agent_id=" + a1 + "&order=asc", []string{id(c1), id(c2), id(c3)}},
		{"?agent_id=" + a1 + "&summary_search=lettaq", []string{id(c3), id(c1)}},
		{"?agent_id=" + a1 + "&summary_search=TELEGRAM:42", []string{id(c1)}},
		{"?summary_search=telegram:42&order=asc", []string{id(c1), id(c4)}},
		{"?agent_id=" + a1 + "&order=asc&limit=1&after=" + id(c1), []string{id(c2)}},
		{"", []string{id(c4), id(c3), id(c2), id(c1)}},
	}
	for _, c := range cases {
		if got := ids(c.q); !eqStrings(got, c.want) {
			t.Errorf("list %s = %v, want %v", c.q, got, c.want)
		}
	}
	if n := len(srv.Conversations(a1)); n != 3 {
		t.Errorf("Conversations(a1) = %d", n)
	}
}

// Malformed ids in a path answer 422 as the schema's patterns say; well-formed unknown ones 404.
func TestConversationIDValidation(t *testing.T) {
	srv := newServer(t, lettasim.Config{AutoCreateAgents: true})
	agent := srv.CreateAgent("v", nil)
	conv := srv.CreateConversation(agent, "")
	unknownConv := "conv-00000000-0000-4000-8000-000000000000"
	unknownAgent := "agent-00000000-0000-4000-8000-000000000000"
	for _, c := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/v1/conversations/conv-nope", nil, 422},
		{"GET", "/v1/conversations/default", nil, 422}, // retrieve takes conv ids only
		{"GET", "/v1/conversations/" + unknownConv, nil, 404},
		{"POST", convPath("conv-nope"), turnReq{Text: "x"}.body(), 422},
		{"POST", convPath("agent-demo"), turnReq{Text: "x"}.body(), 422},
		{"POST", convPath(unknownConv), turnReq{Text: "x"}.body(), 404},
		{"POST", convPath("default"), turnReq{Text: "x"}.body(), 422},                                                  // no agent_id
		{"POST", convPath("default"), turnReq{Text: "x", Extra: map[string]any{"agent_id": "agent-demo"}}.body(), 422}, // malformed
		{"GET", "/v1/conversations/default/messages", nil, 422},
		{"GET", "/v1/conversations/" + conv + "X/messages", nil, 422},
		{"POST", "/v1/conversations/conv-1/stream", `{}`, 422},
		{"POST", "/v1/conversations/conv-1/cancel", nil, 422},
		{"POST", "/v1/conversations/?agent_id=agent-demo", `{}`, 422},
		{"POST", "/v1/conversations/", `{}`, 422},
		{"POST", "/v1/conversations/?agent_id=" + unknownAgent + "x", `{}`, 422},
		{"GET", "/v1/agents/agent-demo/messages", nil, 422},
	} {
		st, _, data := call(t, srv, c.method, c.path, c.body)
		if st != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, st, data, c.want)
			continue
		}
		if st == 422 {
			conform(t, "HTTPValidationError", data)
		} else {
			detail(t, data)
		}
	}
	if n := len(srv.ConversationUserMessages(conv)) + len(srv.UserMessages(agent)); n != 0 {
		t.Fatalf("a refused request stored %d messages", n)
	}
}

// One run at a time per conversation: a send while a run holds the lock is refused with 409 and
// the holder's run id; other conversations of the agent are not blocked.
func TestConversationLockBusy(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("locks", nil)
	conv := srv.CreateConversation(agent, "")
	other := srv.CreateConversation(agent, "")
	holder := holdLock(t, srv, conv, turnReq{Text: "first", Otid: "otid-first"})

	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "second", Otid: "otid-second"}.body())
	if got := busyRunID(t, st, data); got != holder {
		t.Fatalf("busy names %s, want the holder %s", got, holder)
	}
	// The hosted form, asked for by the send.
	st, _, data = call(t, srv, "POST", convPath(conv), turnReq{Text: "[[sim busy_form=hosted]] third"}.body())
	if st != 409 || string(data) != `{"error":"Conversation `+conv+` is busy with another active run."}` {
		t.Fatalf("hosted busy: %d %s", st, data)
	}
	if srv.Conflicts() != 2 {
		t.Fatalf("Conflicts() = %d, want 2", srv.Conflicts())
	}
	// Nothing of the refused sends was stored.
	if n := srv.CountOtid("otid-second"); n != 0 {
		t.Fatalf("refused send stored %d messages", n)
	}
	// Another conversation of the same agent runs at once, and so do the agent endpoints.
	if evs := convStream(t, srv, other, turnReq{Text: "elsewhere"}); withoutPings(evs)[len(withoutPings(evs))-1].typ() != "[DONE]" {
		t.Fatalf("other conversation: %v", types(evs))
	}
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "agent endpoint"}); err != nil {
		t.Fatal(err)
	}
	// Once the holder ends, the lock is free.
	srv.Cancel(testCtx(t), holder)
	convStream(t, srv, conv, turnReq{Text: "second again", Otid: "otid-second"})
	msgs := srv.ConversationUserMessages(conv)
	if len(msgs) != 2 || msgs[0].Otid != "otid-first" || msgs[1].Otid != "otid-second" || msgs[1].ConversationID != conv {
		t.Fatalf("stored %+v", msgs)
	}
	runs := srv.ConversationRuns(conv)
	if len(runs) != 2 || runs[0].ID != holder || runs[0].ConversationID != conv {
		t.Fatalf("runs %+v", runs)
	}
}

// Config.HostedBusy answers every busy in the hosted form; busy_form=detail picks the server's.
func TestConversationHostedBusyConfig(t *testing.T) {
	srv := newServer(t, lettasim.Config{HostedBusy: true})
	agent := srv.CreateAgent("hosted", nil)
	conv := srv.CreateConversation(agent, "")
	holder := holdLock(t, srv, conv, turnReq{Text: "first"})
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "second"}.body())
	var b map[string]any
	_ = json.Unmarshal(data, &b)
	if st != 409 || len(b) != 1 || !strings.Contains(b["error"].(string), "is busy with another active run") {
		t.Fatalf("hosted busy: %d %s", st, data)
	}
	st, _, data = call(t, srv, "POST", convPath(conv), turnReq{Text: "[[sim busy_form=detail]] third"}.body())
	if busyRunID(t, st, data) != holder {
		t.Fatal("detail form names another run")
	}
}

// The lock's TTL is never extended: a run longer than LockTTL stops blocking sends. A background
// send racing a (foreground) holder of its own otid waits in its second chance, which wakes when
// the lock expires: the test measures the TTL without sleeping.
func TestConversationLockTTL(t *testing.T) {
	srv := newServer(t, lettasim.Config{TimeScale: 0.001, SecondChance: time.Hour}) // TTL 300s = 300ms
	agent := srv.CreateAgent("ttl", nil)
	conv := srv.CreateConversation(agent, "")
	locked := time.Now() // before the lock is taken: the TTL runs from a later instant
	holder := holdLock(t, srv, conv, turnReq{Text: "long", Otid: "otid-ttl"})
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "refused", Background: true}.body())
	busyRunID(t, st, data) // another otid: busy at once, no second chance
	if time.Since(locked) > time.Second {
		t.Fatal("a send of another otid waited for a second chance")
	}
	// A background send of the holder's otid waits until the TTL frees the lock, then runs.
	evs := convStream(t, srv, conv, turnReq{Text: "after the ttl", Otid: "otid-ttl", Background: true})
	if waited := time.Since(locked); waited < 300*time.Millisecond {
		t.Fatalf("the send ran %v after the lock was taken, before the 300ms TTL", waited)
	}
	if evs[0].str("run_id") == holder {
		t.Fatal("replayed the holder")
	}
	if run, _ := srv.Run(holder); run.Status != "running" {
		t.Fatalf("the holder should still run: %s", run.Status)
	}
	// The new run holds the lock now (the expired holder does not matter).
	st, _, data = call(t, srv, "POST", convPath(conv), turnReq{Text: "now locked? no: it ended"}.body())
	if st != 200 {
		t.Fatalf("after the second run ended: %d %s", st, data)
	}
}

// Background sends are idempotent: a same-otid resend replays the existing run's stream from the
// start: no new run, no second stored user message.
func TestConversationBackgroundReplay(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("replay", nil)
	conv := srv.CreateConversation(agent, "")
	tr := turnReq{Text: "[[sim tool=web_search]] once", Otid: "otid-once", Background: true}
	first := convStream(t, srv, conv, tr)
	again := convStream(t, srv, conv, tr)
	if first[0].typ() != "ping" || again[0].typ() != "ping" || again[0].str("run_id") != first[0].str("run_id") {
		t.Fatalf("the replay's first ping names %q, want %q", again[0].str("run_id"), first[0].str("run_id"))
	}
	a, b := withoutPings(first), withoutPings(again)
	if len(a) != len(b) || a[0].seq() != 1 {
		t.Fatalf("replay %v of %v", types(b), types(a))
	}
	for i := range a {
		if a[i].Data != b[i].Data {
			t.Fatalf("replay differs at %d: %s vs %s", i, b[i].Data, a[i].Data)
		}
	}
	// Also while the run is still going: a resend during the run follows it.
	tr2 := turnReq{Text: "[[sim think=2s]] slow", Otid: "otid-slow", Background: true}
	resp := convOpen(t, srv, conv, tr2)
	defer resp.Body.Close()
	during := convStream(t, srv, conv, tr2)
	if during[0].str("run_id") == first[0].str("run_id") || withoutPings(during)[len(withoutPings(during))-1].typ() != "[DONE]" {
		t.Fatalf("resend during the run: %v", types(during))
	}
	if srv.CountOtid("otid-once") != 1 || srv.CountOtid("otid-slow") != 1 {
		t.Fatalf("stored %d and %d", srv.CountOtid("otid-once"), srv.CountOtid("otid-slow"))
	}
	if n := len(srv.ConversationRuns(conv)); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// Without background there is no map: a same-otid resend gets 409 while the first run holds
// the lock, and starts a new run (a second stored message) after it.
func TestConversationForegroundResendIsNewRun(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("fg", nil)
	conv := srv.CreateConversation(agent, "")
	holder := holdLock(t, srv, conv, turnReq{Text: "fg", Otid: "otid-fg"})
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "fg", Otid: "otid-fg"}.body())
	busyRunID(t, st, data)
	srv.Cancel(testCtx(t), holder)
	evs := convStream(t, srv, conv, turnReq{Text: "fg", Otid: "otid-fg"})
	if evs[0].str("run_id") == holder {
		t.Fatal("foreground resend replayed the run")
	}
	if n := srv.CountOtid("otid-fg"); n != 2 {
		t.Fatalf("CountOtid = %d, want 2 (no dedupe without background)", n)
	}
	// And a background resend of a foreground turn is a new run as well: nothing was mapped.
	evs = convStream(t, srv, conv, turnReq{Text: "fg", Otid: "otid-fg", Background: true})
	if n := srv.CountOtid("otid-fg"); n != 3 {
		t.Fatalf("CountOtid = %d, want 3", n)
	}
}

// A same-otid background send that loses the race to the lock holder (whose otids are not
// mapped yet) is retried by the server for SecondChance before the 409.
func TestConversationSecondChance(t *testing.T) {
	for _, c := range []struct {
		name   string
		lag    time.Duration // RegisterLag, unscaled
		replay bool
	}{
		{"mapped within the window", 500 * time.Millisecond, true},
		{"mapped too late", 5 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Scale 0.1: the window is 175ms, the lag 50ms or 500ms.
			srv := newServer(t, lettasim.Config{TimeScale: 0.1, RegisterLag: c.lag})
			agent := srv.CreateAgent("race", nil)
			conv := srv.CreateConversation(agent, "")
			tr := turnReq{Text: "race", Otid: "otid-race", Background: true}
			holder := holdLock(t, srv, conv, tr)
			start := time.Now()
			resp := convOpen(t, srv, conv, turnReq{Text: "[[sim think=100h]] race", Otid: "otid-race", Background: true})
			defer resp.Body.Close()
			waited := time.Since(start)
			if !c.replay {
				data, _ := io.ReadAll(resp.Body)
				if busyRunID(t, resp.StatusCode, data) != holder {
					t.Fatal("busy names another run")
				}
				if waited < 175*time.Millisecond {
					t.Fatalf("409 after %v, before the 175ms second chance", waited)
				}
				return
			}
			if resp.StatusCode != 200 {
				data, _ := io.ReadAll(resp.Body)
				t.Fatalf("%d %s", resp.StatusCode, data)
			}
			ev, err := newSSE(t, resp.Body).next()
			if err != nil || ev.str("run_id") != holder {
				t.Fatalf("second chance replayed %q, want %s (%v)", ev.str("run_id"), holder, err)
			}
			if srv.CountOtid("otid-race") != 1 || srv.Conflicts() != 0 {
				t.Fatalf("stored %d, conflicts %d", srv.CountOtid("otid-race"), srv.Conflicts())
			}
		})
	}
}

// resumeConv posts to a conversation's stream endpoint.
func resumeConv(t *testing.T, srv *lettasim.Server, id, body string) (int, []event, []byte) {
	t.Helper()
	resp := do(t, srv, "POST", "/v1/conversations/"+id+"/stream", body, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, data
	}
	evs, err := newSSE(t, resp.Body).all()
	if err != nil {
		t.Fatal(err)
	}
	return 200, evs, nil
}

func TestConversationResume(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("resume", nil)
	conv := srv.CreateConversation(agent, "")
	// The stream is cut after the ping and one chunk; the run goes on.
	resp := convOpen(t, srv, conv, turnReq{Text: "[[sim tool=web_search answer_delay=10m disconnect_after=2]] cut", Otid: "otid-cut", Background: true})
	evs, _ := newSSE(t, resp.Body).all()
	resp.Body.Close()
	runID := evs[0].str("run_id")

	// Newest active run (no body at all).
	st, got, data := resumeConv(t, srv, conv, "")
	if st != 200 || got[0].str("run_id") != runID || withoutPings(got)[0].seq() != 1 {
		t.Fatalf("newest: %d %s %v", st, data, types(got))
	}
	// By otid, from a seq_id.
	st, got, data = resumeConv(t, srv, conv, `{"otid": "otid-cut", "starting_after": 2}`)
	if st != 200 || withoutPings(got)[0].seq() != 3 || got[0].str("run_id") != runID {
		t.Fatalf("by otid: %d %s %v", st, data, types(got))
	}
	// By run id.
	st, got, _ = resumeConv(t, srv, conv, `{"run_id": "`+runID+`", "include_pings": false}`)
	if st != 200 || got[0].typ() == "ping" || got[len(got)-1].typ() != "[DONE]" {
		t.Fatalf("by run: %d %v", st, types(got))
	}
	// Errors.
	for _, c := range []struct {
		body string
		st   int
		text string
	}{
		{`{"otid": "otid-unknown"}`, 404, "No run found for otid=otid-unknown"},
		{`{}`, 400, "No active runs found"},
		{`{"run_id": "run-00000000-0000-4000-8000-000000000000"}`, 404, "not found"},
	} {
		st, _, data := resumeConv(t, srv, conv, c.body)
		if st != c.st || !strings.Contains(detail(t, data), c.text) {
			t.Errorf("resume %s: %d %s, want %d %q", c.body, st, data, c.st, c.text)
		}
	}
	// A foreground run cannot be resumed.
	fg := convStream(t, srv, conv, turnReq{Text: "fg"})
	st, _, data = resumeConv(t, srv, conv, `{"run_id": "`+fg[0].str("run_id")+`"}`)
	if st != 400 || !strings.Contains(detail(t, data), "not created in background mode") {
		t.Fatalf("foreground: %d %s", st, data)
	}
	// The newest active run, when it is a foreground one: 400 too.
	holder := holdLock(t, srv, conv, turnReq{Text: "fg holder"})
	st, _, data = resumeConv(t, srv, conv, `{}`)
	if st != 400 || !strings.Contains(detail(t, data), holder) {
		t.Fatalf("newest foreground: %d %s", st, data)
	}
}

// 410 when the run was created more than ResumeMaxAge ago, by otid or run id.
func TestConversationResumeGone(t *testing.T) {
	srv := newServer(t, lettasim.Config{ResumeMaxAge: time.Nanosecond})
	agent := srv.CreateAgent("gone", nil)
	conv := srv.CreateConversation(agent, "")
	evs := convStream(t, srv, conv, turnReq{Text: "old", Otid: "otid-old", Background: true})
	for _, body := range []string{`{"otid": "otid-old"}`, `{"run_id": "` + evs[0].str("run_id") + `"}`} {
		st, _, data := resumeConv(t, srv, conv, body)
		if st != 410 || !strings.Contains(detail(t, data), "expired") {
			t.Fatalf("resume %s: %d %s", body, st, data)
		}
	}
}

// The otid map expires after OtidMapTTL (scaled): a resend after that is a new run.
func TestConversationOtidMapExpires(t *testing.T) {
	srv := newServer(t, lettasim.Config{TimeScale: 0.001, OtidMapTTL: time.Nanosecond})
	agent := srv.CreateAgent("expire", nil)
	conv := srv.CreateConversation(agent, "")
	tr := turnReq{Text: "x", Otid: "otid-exp", Background: true}
	first := convStream(t, srv, conv, tr)
	again := convStream(t, srv, conv, tr)
	if again[0].str("run_id") == first[0].str("run_id") || srv.CountOtid("otid-exp") != 2 {
		t.Fatal("an expired mapping still replayed")
	}
	st, _, data := resumeConv(t, srv, conv, `{"otid": "otid-exp"}`)
	if st != 404 {
		t.Fatalf("resume by an expired otid: %d %s", st, data)
	}
}

// A run's stream keeps at most ~MaxStreamChunks chunks: a resume from 0 starts at the oldest kept.
func TestConversationStreamTrimming(t *testing.T) {
	srv := newServer(t, lettasim.Config{MaxStreamChunks: 8})
	agent := srv.CreateAgent("trim", nil)
	conv := srv.CreateConversation(agent, "")
	long := strings.Repeat("word ", 40)
	evs := convStream(t, srv, conv, turnReq{Text: `[[sim tokens tool=a,b,c answer="` + long + `"]] long`, Background: true})
	runID := evs[0].str("run_id")
	info, _ := srv.Run(runID)
	total := info.Chunks // frames, [DONE] included
	if total < 30 {
		t.Fatalf("only %d chunks: the test needs a long run", total)
	}
	if n := len(withoutPings(evs)); n >= total {
		t.Fatalf("the first stream read %d chunks of %d: nothing was trimmed under it", n, total)
	}
	st, got, _ := resumeConv(t, srv, conv, `{"run_id": "`+runID+`"}`)
	kept := withoutPings(got)
	if st != 200 || len(kept) > 11 || len(kept) < 8 {
		t.Fatalf("resume from 0: %d chunks of %d", len(kept), total)
	}
	if first := kept[0].seq(); first <= 1 || first != total-len(kept)+1 {
		t.Fatalf("resume from 0 starts at seq %d (kept %d of %d)", first, len(kept), total)
	}
	if kept[len(kept)-1].typ() != "[DONE]" {
		t.Fatal("the trimmed stream lost its end")
	}
	// The run's messages are all there.
	var msgs []map[string]any
	getJSON(t, srv, "/v1/runs/"+runID+"/messages", &msgs)
	if len(msgs) < 8 {
		t.Fatalf("run messages %d", len(msgs))
	}
}

// "default" with agent_id (or the agent id itself) is the agent's default thread: locked per
// agent, its history the agent's.
func TestConversationDefaultThread(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	a1 := srv.CreateAgent("one", nil)
	a2 := srv.CreateAgent("two", nil)
	holder := holdLock(t, srv, "default", turnReq{Text: "a1 default", Extra: map[string]any{"agent_id": a1}})

	st, _, data := call(t, srv, "POST", convPath("default"), turnReq{Text: "again", Extra: map[string]any{"agent_id": a1}}.body())
	if busyRunID(t, st, data) != holder {
		t.Fatal("busy names another run")
	}
	st, _, data = call(t, srv, "POST", convPath(a1), turnReq{Text: "by agent id"}.body())
	if busyRunID(t, st, data) != holder {
		t.Fatal("the agent id is not the default thread")
	}
	// Another agent's default thread, a conversation of a1, and a1's agent endpoints are free.
	convStream(t, srv, "default", turnReq{Text: "a2", Extra: map[string]any{"agent_id": a2}})
	convStream(t, srv, srv.CreateConversation(a1, ""), turnReq{Text: "a1 conv"})
	if _, _, err := streamTurn(t, srv, a1, turnReq{Text: "agent endpoint"}); err != nil {
		t.Fatal(err)
	}
	// The default thread's messages are the agent's history; a conversation's are not.
	var viaDefault, viaAgent []map[string]any
	getJSON(t, srv, "/v1/conversations/default/messages?agent_id="+a1+"&order=asc", &viaDefault)
	getJSON(t, srv, "/v1/agents/"+a1+"/messages?order=asc", &viaAgent)
	if len(viaDefault) != len(viaAgent) || viaDefault[0]["content"] != "[[sim think=100h]] a1 default" {
		t.Fatalf("default thread %v", viaDefault)
	}
	for _, m := range viaAgent {
		if m["content"] == "a1 conv" {
			t.Fatal("a conversation's message is in the agent's history")
		}
	}
	if n := len(srv.ConversationUserMessages(a1)); n != 1 {
		t.Fatalf("default thread user messages %d", n)
	}
	if n := len(srv.UserMessages(a1)); n != 3 {
		t.Fatalf("agent user messages %d, want 3 (every thread)", n)
	}
	// Cancel of the default thread.
	st, _, data = call(t, srv, "POST", "/v1/conversations/default/cancel?agent_id="+a1, nil)
	if st != 200 || !strings.Contains(string(data), holder) {
		t.Fatalf("cancel default: %d %s", st, data)
	}
}

// A conversation's history lists with cursors like the agent list, and holds only its messages.
func TestConversationMessages(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("list", nil)
	c1 := srv.CreateConversation(agent, "")
	c2 := srv.CreateConversation(agent, "")
	convStream(t, srv, c1, turnReq{Text: "one"})
	convStream(t, srv, c2, turnReq{Text: "other"})
	convStream(t, srv, c1, turnReq{Text: "two"})
	all := conformMessages(t, getJSON(t, srv, "/v1/conversations/"+c1+"/messages?order=asc", nil))
	var users []string
	for _, m := range all {
		if m["message_type"] == "user_message" {
			users = append(users, m["content"].(string))
		}
	}
	if !eqStrings(users, []string{"one", "two"}) || len(all) != 6 {
		t.Fatalf("c1 messages %v (%d)", users, len(all))
	}
	// limit counts rows: the reasoning and the answer of a step are one.
	page := conformMessages(t, getJSON(t, srv, "/v1/conversations/"+c1+"/messages?order=asc&limit=1&after="+all[0]["id"].(string), nil))
	if len(page) != 2 || page[0]["id"] != all[1]["id"] || page[1]["id"] != all[1]["id"] {
		t.Fatalf("page after %v", page)
	}
	// A cursor of another conversation is not found.
	other := conformMessages(t, getJSON(t, srv, "/v1/conversations/"+c2+"/messages", nil))
	st, _, data := call(t, srv, "GET", "/v1/conversations/"+c1+"/messages?after="+other[0]["id"].(string), nil)
	if st != 404 {
		t.Fatalf("foreign cursor: %d %s", st, data)
	}
	if h := srv.ConversationHistory(c1); len(h) != 6 || h[0].Text != "one" {
		t.Fatalf("ConversationHistory %+v", h)
	}
}

func TestConversationCancel(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("cancel", nil)
	conv := srv.CreateConversation(agent, "")
	st, _, data := call(t, srv, "POST", "/v1/conversations/"+conv+"/cancel", nil)
	if st != 409 || !strings.HasPrefix(detail(t, data), "NO_ACTIVE_RUNS_TO_CANCEL") {
		t.Fatalf("nothing to cancel: %d %s", st, data)
	}
	holder := holdLock(t, srv, conv, turnReq{Text: "long"})
	st, _, data = call(t, srv, "POST", "/v1/conversations/"+conv+"/cancel", nil)
	if st != 200 || string(data) != `{"`+holder+`":"cancelled"}` {
		t.Fatalf("cancel: %d %s", st, data)
	}
	if run, _ := srv.Run(holder); run.StopReason != "cancelled" {
		t.Fatalf("run %+v", run)
	}
	// The lock went with the run.
	convStream(t, srv, conv, turnReq{Text: "next"})
}

// streaming=false answers a LettaResponse once the run has ended, under the same lock.
func TestConversationNonStreaming(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("sync", nil)
	conv := srv.CreateConversation(agent, "")
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "sync", Extra: map[string]any{"streaming": false}}.body())
	if st != 200 {
		t.Fatalf("%d %s", st, data)
	}
	conform(t, "LettaResponse", data)
	if !strings.Contains(string(data), "you said: sync") {
		t.Fatalf("%s", data)
	}
}

// Script.TokenDelay streams a text one word per chunk, TokenDelay (scaled) apart.
func TestTokenDelay(t *testing.T) {
	srv := newServer(t, lettasim.Config{TimeScale: 0.01})
	agent := srv.CreateAgent("typist", &lettasim.Script{Tokens: true, TokenDelay: time.Second, Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "one two three four five"},
	}})
	start := time.Now()
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "type"})
	if err != nil {
		t.Fatal(err)
	}
	var chunks []string
	for _, e := range evs {
		if e.typ() == "assistant_message" {
			chunks = append(chunks, e.str("content"))
		}
	}
	if !eqStrings(chunks, []string{"one ", "two ", "three ", "four ", "five"}) {
		t.Fatalf("chunks %q", chunks)
	}
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Fatalf("5 words in %v: want 4 gaps of 10ms", took)
	}
	// Cancelled mid-sentence, the run ends cancelled.
	srv.SetScript(agent, &lettasim.Script{Tokens: true, TokenDelay: time.Hour, Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "one two three"},
	}})
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", turnReq{Text: "slow"}.body(), nil)
	defer resp.Body.Close()
	sse := newSSE(t, resp.Body)
	ev, _ := sse.next()
	runID := ev.str("run_id")
	srv.Cancel(testCtx(t), runID)
	if run, _ := srv.Run(runID); run.StopReason != "cancelled" {
		t.Fatalf("run %+v", run)
	}
}

// The agent endpoints keep no lock and map no otids: a background resend with the same otid
// starts a second run and stores a second message, where the conversation endpoint replays.
func TestAgentEndpointsDoNotDedupe(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("old way", nil)
	tr := turnReq{Text: "twice", Otid: "otid-agent", Background: true}
	_, first, err := streamTurn(t, srv, agent, tr)
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := streamTurn(t, srv, agent, tr)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].str("run_id") == again[0].str("run_id") || srv.CountOtid("otid-agent") != 2 {
		t.Fatalf("agent endpoint deduplicated: %d stored", srv.CountOtid("otid-agent"))
	}
	// The same through the agent's default thread: one run, one message.
	tr.Otid = "otid-default"
	tr.Extra = map[string]any{"agent_id": agent}
	a, b := convStream(t, srv, "default", tr), convStream(t, srv, "default", tr)
	if a[0].str("run_id") != b[0].str("run_id") || srv.CountOtid("otid-default") != 1 {
		t.Fatalf("default thread stored %d", srv.CountOtid("otid-default"))
	}
}

// A Busy fault on a conversation send answers in the conversation's busy form, storing nothing.
func TestConversationBusyFault(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("busy", nil)
	conv := srv.CreateConversation(agent, "")
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "[[sim busy]] hi", Otid: "otid-busy"}.body())
	busyRunID(t, st, data)
	if srv.CountOtid("otid-busy") != 0 || srv.Conflicts() != 1 {
		t.Fatalf("stored %d, conflicts %d", srv.CountOtid("otid-busy"), srv.Conflicts())
	}
	// The retry (same otid) passes: directive faults hit the first attempt only.
	convStream(t, srv, conv, turnReq{Text: "[[sim busy]] hi", Otid: "otid-busy"})
	if srv.CountOtid("otid-busy") != 1 {
		t.Fatal("the retry was not stored")
	}
}

// A PendingApproval fault answers 409 "waiting for approval" on both kinds of endpoint, never
// the busy form, and stores nothing.
func TestPendingApprovalFault(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	conv := srv.CreateConversation(agent, "")
	for _, path := range []string{convPath(conv), "/v1/agents/" + agent + "/messages/stream"} {
		st, _, data := call(t, srv, "POST", path, turnReq{Text: "[[sim pending_approval]] hi"}.body())
		if st != 409 || !strings.Contains(detail(t, data), "waiting for approval on a tool call") {
			t.Fatalf("%s: %d %s", path, st, data)
		}
	}
	srv.SetFault(agent, lettasim.Fault{PendingApproval: true})
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "hi"}.body())
	if st != 409 || strings.Contains(string(data), "run_id") {
		t.Fatalf("%d %s", st, data)
	}
	if len(srv.UserMessages(agent)) != 0 || srv.Conflicts() != 0 {
		t.Fatal("a refused send was stored or counted as busy")
	}
}
