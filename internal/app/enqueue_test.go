package app

import (
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue"
)

// Every phase reads differently on the live view: a viewer must tell a lost
// stream from the run being continued.
func TestPhaseTextDistinct(t *testing.T) {
	seen := map[string]queue.ReplyPhase{}
	for _, p := range []queue.ReplyPhase{queue.PhaseConnecting, queue.PhaseStreaming, queue.PhaseThinking, queue.PhaseToolRunning,
		queue.PhaseRecovering, queue.PhaseContinuing} {
		for _, run := range []string{"", "run-1"} {
			text := phaseText(queue.ReplyEvent{Type: queue.EventPhase, Phase: p, RunID: run})
			if text == "" || text == string(p) && p != queue.PhaseThinking {
				t.Errorf("phase %q (run %q): no label (%q)", p, run, text)
			}
			if other, ok := seen[text]; ok && other != p {
				t.Errorf("phases %q and %q both read %q", other, p, text)
			}
			seen[text] = p
			if run != "" && (p == queue.PhaseRecovering || p == queue.PhaseContinuing) && !strings.Contains(text, run) {
				t.Errorf("phase %q does not name the run: %q", p, text)
			}
		}
	}
}
