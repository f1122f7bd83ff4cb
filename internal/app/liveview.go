package app

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/record"
)

// viewer shows a turn's events: on a terminal a live status line and the answer as it grows;
// otherwise one plain line per event on stderr and the answer on stdout; with json one event
// per line on stdout. Everything it prints that came from elsewhere (tool names, narration,
// answers, errors) is escaped with termSafe.
//
// The status line tells what is happening now: a tool that was called keeps its line until
// its return arrives (the heartbeat's phases and the agent's narration while it runs do not
// replace it), and the line shows both the time in the current step and the turn's total.
type viewer struct {
	tty, json  bool
	out, errw  io.Writer
	now        func() time.Time
	start      time.Time
	status     string // e.g. "thinking…"
	statusAt   time.Time
	statusLen  int
	tools      []runningTool // called, not yet returned, oldest first
	streamed   strings.Builder
	narration  strings.Builder // the narration shown since the last other event: it comes in pieces
	inAnswer   bool
	lastPhase  string
	lastDetail string
	// hint writes an enqueue command line runnable as printed (the user's connection
	// flags included); nil writes a bare "enqueue …".
	hint func(args ...string) string
}

type runningTool struct {
	name, callID string
	since        time.Time
}

// newViewer returns a viewer whose clock is now (nil: time.Now), started now.
func newViewer(tty, jsonOut bool, out, errw io.Writer, now func() time.Time) *viewer {
	if now == nil {
		now = time.Now
	}
	if _, ok := errw.(termWriter); !ok {
		errw = termWriter{errw}
	}
	return &viewer{tty: tty && !jsonOut, json: jsonOut, out: out, errw: errw, now: now, start: now()}
}

func (v *viewer) show(ev record.ReplyEvent) (exit int, done bool) {
	if v.json {
		_ = writeJSON(v.out, ev, false)
	}
	// Narration streams in pieces: the status line shows it whole, until something else
	// happens (a heartbeat's "thinking" does not end it).
	if !(ev.Type == record.EventAnswerDelta && ev.Narration) && !(ev.Type == record.EventPhase && ev.Phase == record.PhaseThinking) {
		v.narration.Reset()
	}
	switch ev.Type {
	case record.EventAccepted:
		v.setStatus("queued", fmt.Sprintf("queued (position %d)", ev.Position), time.Time{})
	case record.EventPhase:
		if t, ok := v.runningTool(); ok && !phaseOverridesTool(ev.Phase) {
			// The heartbeat's "running a tool…" or "thinking…": the tool's line says more.
			v.setStatus("tool", toolText(t), t.since)
			break
		}
		v.setStatus(string(ev.Phase), phaseText(ev), time.Time{})
	case record.EventTool:
		if ev.Tool == nil {
			break
		}
		switch ev.Tool.Status {
		case record.ToolStatusCall, "":
			t := runningTool{name: ev.Tool.Name, callID: ev.Tool.CallID, since: v.now()}
			v.tools = append(v.tools, t)
			v.setStatus("tool", toolText(t), t.since)
		default:
			text := "tool " + ev.Tool.Name + ": " + ev.Tool.Status
			if t, ok := v.toolReturned(ev.Tool); ok {
				text += fmt.Sprintf(" (took %.1fs)", v.now().Sub(t.since).Seconds())
			}
			if t, ok := v.runningTool(); ok {
				v.setStatus("tool", toolText(t), t.since) // another call still runs
				break
			}
			v.setStatus("tool", text, time.Time{})
		}
	case record.EventAnswerDelta:
		if ev.Narration {
			if _, ok := v.runningTool(); ok && v.tty {
				break // the tool still runs: its line stays
			}
			v.narration.WriteString(ev.Text)
			v.setStatus("thinking", "thinking: "+oneLineTail(v.narration.String(), 60), time.Time{})
			break
		}
		v.tools = nil
		v.streamed.WriteString(ev.Text)
		if v.tty {
			v.clearStatus()
			v.inAnswer = true
			fmt.Fprint(v.out, termSafe(ev.Text, true))
		}
	case record.EventAnswer:
		v.finishAnswer(ev.Text)
		if ev.AnsweredBy != "" && !v.json {
			fmt.Fprintf(v.errw, "(answered together with task %s)\n", ev.AnsweredBy)
		}
		return ExitOK, true
	case record.EventApprovalRequired:
		v.clearStatus()
		if !v.json {
			showApproval(v.errw, ev, v.hint)
		}
		return ExitApproval, true
	case record.EventError:
		if ev.Permanent {
			v.clearStatus()
			if v.inAnswer {
				fmt.Fprintln(v.out)
			}
			switch {
			case v.json:
			case ev.StopReason == record.StopReasonCancelled:
				// (text is what the agent had said, not an error message)
				fmt.Fprintf(v.errw, "cancelled: the turn was stopped before it finished\n")
			default:
				fmt.Fprintf(v.errw, "error: %s\n", ev.Text)
			}
			return ExitFailed, true
		}
		v.tools = nil // the attempt ended; the next one starts over
		v.setStatus("retrying", "attempt failed, will retry: "+oneLine(ev.Text, 80), time.Time{})
	}
	return 0, false
}

// phaseOverridesTool: phases that say more than a running tool's line (the stream broke).
func phaseOverridesTool(p record.ReplyPhase) bool {
	return p == record.PhaseRecovering || p == record.PhaseContinuing || p == record.PhaseConnecting
}

func toolText(t runningTool) string { return "using tool " + t.name + "…" }

func (v *viewer) runningTool() (runningTool, bool) {
	if len(v.tools) == 0 {
		return runningTool{}, false
	}
	return v.tools[len(v.tools)-1], true
}

// toolReturned removes the call that ev answers (by call id, else the oldest of that name).
func (v *viewer) toolReturned(ev *record.ToolEvent) (runningTool, bool) {
	for i, t := range v.tools {
		if (ev.CallID != "" && t.callID == ev.CallID) || (ev.CallID == "" && t.name == ev.Name) {
			v.tools = append(v.tools[:i:i], v.tools[i+1:]...)
			return t, true
		}
	}
	return runningTool{}, false
}

func phaseText(ev record.ReplyEvent) string {
	switch ev.Phase {
	case record.PhaseThinking:
		return "thinking…"
	case record.PhaseToolRunning:
		return "running a tool…"
	case record.PhaseRecovering:
		if ev.RunID != "" {
			return "recovering: stream lost, run " + ev.RunID + " goes on"
		}
		return "recovering: stream lost, looking for the turn at Letta"
	case record.PhaseContinuing:
		if ev.RunID != "" {
			return "recovering: continuing run " + ev.RunID
		}
		return "recovering: continuing"
	case record.PhaseConnecting:
		return "connecting to the agent…"
	case record.PhaseStreaming:
		return "streaming…"
	case record.PhaseAwaitingApproval:
		return "waiting: the agent's approval request in this conversation is not answered yet"
	}
	return string(ev.Phase)
}

// setStatus makes text the status line; since is when what it describes began (zero: now,
// unless the text is unchanged: heartbeats repeat a phase without restarting its clock).
func (v *viewer) setStatus(key, text string, since time.Time) {
	if v.json {
		return
	}
	if !v.tty {
		if key == v.lastPhase && text == v.lastDetail {
			return // heartbeats repeat the phase
		}
		v.lastPhase, v.lastDetail = key, text
		fmt.Fprintf(v.errw, "[%5.1fs] %s\n", v.now().Sub(v.start).Seconds(), text)
		return
	}
	if v.status != text {
		v.status, v.statusAt = text, since
		if since.IsZero() {
			v.statusAt = v.now()
		}
	}
	if !v.inAnswer {
		v.redraw()
	}
}

// statusLine is the status line as drawn: the status, the time in it and the turn's total.
func (v *viewer) statusLine() string {
	if v.status == "" {
		return ""
	}
	now := v.now()
	return fmt.Sprintf("%s %ds · %ds in all", termSafe(v.status, false),
		int(now.Sub(v.statusAt).Seconds()), int(now.Sub(v.start).Seconds()))
}

// redraw rewrites the status line.
func (v *viewer) redraw() {
	if !v.tty || v.inAnswer || v.status == "" {
		return
	}
	line := v.statusLine()
	fmt.Fprintf(v.out, "\r\033[K\033[2m%s\033[0m", line)
	v.statusLen = utf8.RuneCountInString(line)
}

func (v *viewer) clearStatus() {
	if v.tty && v.statusLen > 0 {
		fmt.Fprint(v.out, "\r\033[K")
		v.statusLen = 0
	}
}

func (v *viewer) finishAnswer(full string) {
	if v.json {
		return
	}
	if v.tty {
		v.clearStatus()
		shown := v.streamed.String()
		switch {
		case shown == full:
		case strings.HasPrefix(full, shown) && v.inAnswer:
			fmt.Fprint(v.out, termSafe(full[len(shown):], true))
		default:
			if v.inAnswer {
				fmt.Fprintln(v.out)
			}
			fmt.Fprint(v.out, termSafe(full, true))
		}
		fmt.Fprintln(v.out)
		return
	}
	// Not a terminal: the answer is data for whatever reads stdout, as the agent wrote it.
	fmt.Fprintln(v.out, full)
}

// oneLineTail is oneLine keeping the end: the latest n runes of growing text.
func oneLineTail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return "…" + string(r[len(r)-n:])
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		r := []rune(s)
		return string(r[:n]) + "…"
	}
	return s
}
