package app

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/record"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func toolEv(name, id, status string) record.ReplyEvent {
	return record.ReplyEvent{Type: record.EventTool, Tool: &record.ToolEvent{Name: name, CallID: id, Status: status}}
}
func phaseEv(p record.ReplyPhase) record.ReplyEvent {
	return record.ReplyEvent{Type: record.EventPhase, Phase: p}
}
func narrEv(s string) record.ReplyEvent {
	return record.ReplyEvent{Type: record.EventAnswerDelta, Text: s, Narration: true}
}

// On a terminal the status line tells what is happening: a called tool keeps its line until
// its return arrives (heartbeat phases and narration meanwhile do not replace it), and the
// line shows the time in the step and the turn's total.
func TestLiveViewKeepsTheToolLine(t *testing.T) {
	c := newFakeClock()
	var out, errw bytes.Buffer
	v := newViewer(true, false, &out, &errw, c.now)
	steps := []struct {
		after time.Duration
		ev    record.ReplyEvent
		want  string // the status line after the event
	}{
		{0, record.ReplyEvent{Type: record.EventAccepted}, "queued (position 0) 0s · 0s in all"},
		{time.Second, phaseEv(record.PhaseThinking), "thinking… 0s · 1s in all"},
		{0, narrEv("I should look this up."), "thinking: I should look this up. 0s · 1s in all"},
		{500 * time.Millisecond, toolEv("web_search", "call-1", record.ToolStatusCall), "using tool web_search… 0s · 1s in all"},
		{500 * time.Millisecond, phaseEv(record.PhaseToolRunning), "using tool web_search… 0s · 2s in all"},
		{time.Second, narrEv("Still looking."), "using tool web_search… 1s · 3s in all"},
		{1500 * time.Millisecond, phaseEv(record.PhaseThinking), "using tool web_search… 3s · 4s in all"},
		{4 * time.Second, phaseEv(record.PhaseToolRunning), "using tool web_search… 7s · 8s in all"}, // a heartbeat
		{500 * time.Millisecond, toolEv("web_search", "call-1", record.ToolStatusSuccess), "tool web_search: success (took 7.5s) 0s · 9s in all"},
		{time.Second, phaseEv(record.PhaseThinking), "thinking… 0s · 10s in all"},
		{2 * time.Second, phaseEv(record.PhaseThinking), "thinking… 2s · 12s in all"}, // the heartbeat does not restart the clock
		// A lost stream says more than a running tool; the tool's line comes back after.
		{0, toolEv("fetch", "call-2", record.ToolStatusCall), "using tool fetch… 0s · 12s in all"},
		{time.Second, phaseEv(record.PhaseRecovering), "recovering: stream lost, looking for the turn at Letta 0s · 13s in all"},
		{time.Second, phaseEv(record.PhaseToolRunning), "using tool fetch… 2s · 14s in all"},
		{0, toolEv("fetch", "call-2", record.ToolStatusError), "tool fetch: error (took 2.0s) 0s · 14s in all"},
	}
	for i, s := range steps {
		c.add(s.after)
		if _, done := v.show(s.ev); done {
			t.Fatalf("step %d: the view ended", i)
		}
		if got := v.statusLine(); got != s.want {
			t.Errorf("step %d (%s %s): status %q, want %q", i, s.ev.Type, s.ev.Phase, got, s.want)
		}
	}
	v.show(record.ReplyEvent{Type: record.EventAnswerDelta, Text: "Found "})
	code, done := v.show(record.ReplyEvent{Type: record.EventAnswer, Text: "Found it."})
	if !done || code != ExitOK || !strings.HasSuffix(out.String(), "\r\x1b[KFound it.\n") {
		t.Errorf("answer: exit %d done %v, output ends %q", code, done, out.String()[max(0, out.Len()-40):])
	}
}

// Narration that arrives in pieces (token streaming) shows whole on the status line, growing,
// its latest words kept when it is long; a tool call starts a new one.
func TestLiveViewNarrationInPieces(t *testing.T) {
	c := newFakeClock()
	var out, errw bytes.Buffer
	v := newViewer(true, false, &out, &errw, c.now)
	for _, s := range []struct {
		ev   record.ReplyEvent
		want string
	}{
		{narrEv("The user wrote to "), "thinking: The user wrote to 0s · 0s in all"},
		{narrEv("me. I will answer."), "thinking: The user wrote to me. I will answer. 0s · 0s in all"},
		{phaseEv(record.PhaseThinking), "thinking… 0s · 0s in all"}, // a heartbeat
		{narrEv(" Then I will look up the weather for the mountains this weekend."),
			"thinking: …n I will look up the weather for the mountains this weekend. 0s · 0s in all"},
		{toolEv("web_search", "c1", record.ToolStatusCall), "using tool web_search… 0s · 0s in all"},
		{toolEv("web_search", "c1", record.ToolStatusSuccess), "tool web_search: success (took 0.0s) 0s · 0s in all"},
		{narrEv("Found it."), "thinking: Found it. 0s · 0s in all"},
	} {
		v.show(s.ev)
		if got := v.statusLine(); got != s.want {
			t.Errorf("after %q: status %q, want %q", s.ev.Text, got, s.want)
		}
	}
}

// Off a terminal, one line per change on stderr, in the order things happen: the heartbeat's
// phases do not repeat the running tool, the total time leads each line.
func TestLiveViewPlainLines(t *testing.T) {
	c := newFakeClock()
	var out, errw bytes.Buffer
	v := newViewer(false, false, &out, &errw, c.now)
	for _, s := range []struct {
		after time.Duration
		ev    record.ReplyEvent
	}{
		{0, phaseEv(record.PhaseThinking)},
		{0, narrEv("I should look this up.")},
		{time.Second, toolEv("web_search", "c1", record.ToolStatusCall)},
		{0, phaseEv(record.PhaseToolRunning)},
		{4 * time.Second, phaseEv(record.PhaseToolRunning)},
		{time.Second, toolEv("web_search", "c1", record.ToolStatusSuccess)},
		{0, phaseEv(record.PhaseThinking)},
	} {
		c.add(s.after)
		v.show(s.ev)
	}
	v.show(record.ReplyEvent{Type: record.EventAnswer, Text: "done \x1b[2J"})
	want := "[  0.0s] thinking…\n[  0.0s] thinking: I should look this up.\n[  1.0s] using tool web_search…\n" +
		"[  6.0s] tool web_search: success (took 5.0s)\n[  6.0s] thinking…\n"
	if errw.String() != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errw.String(), want)
	}
	// Not a terminal: the answer is data, as the agent wrote it.
	if out.String() != "done \x1b[2J\n" {
		t.Errorf("stdout %q", out.String())
	}
}

// What the agent names (tools, narration, answers) is escaped on the status line and in
// the answer on a terminal.
func TestLiveViewEscapes(t *testing.T) {
	c := newFakeClock()
	var out, errw bytes.Buffer
	v := newViewer(true, false, &out, &errw, c.now)
	v.show(toolEv("x"+hostile, "c1", record.ToolStatusCall))
	v.show(toolEv("x"+hostile, "c1", record.ToolStatusSuccess))
	v.show(narrEv(hostile))
	v.show(record.ReplyEvent{Type: record.EventAnswerDelta, Text: "a\n\tb" + hostile})
	v.show(record.ReplyEvent{Type: record.EventAnswer, Text: "a\n\tb" + hostile + "!"})
	assertNoInjection(t, "the live view", out.String())
	if !strings.Contains(out.String(), "a\n\tb\\x1b]0;pwned\\x07") {
		t.Errorf("the answer keeps newline and tab and shows the rest escaped: %q", out.String())
	}
	v = newViewer(false, false, &out, &errw, c.now)
	v.show(record.ReplyEvent{Type: record.EventError, Permanent: true, Text: hostile})
	assertNoInjection(t, "an error", errw.String())
}
