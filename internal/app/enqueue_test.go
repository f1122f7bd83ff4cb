package app

import (
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue/record"
)

// Every phase reads differently on the live view: a viewer must tell a lost
// stream from the run being continued.
func TestPhaseTextDistinct(t *testing.T) {
	seen := map[string]record.ReplyPhase{}
	for _, p := range []record.ReplyPhase{record.PhaseConnecting, record.PhaseStreaming, record.PhaseThinking, record.PhaseToolRunning,
		record.PhaseRecovering, record.PhaseContinuing} {
		for _, run := range []string{"", "run-1"} {
			text := phaseText(record.ReplyEvent{Type: record.EventPhase, Phase: p, RunID: run})
			if text == "" || text == string(p) && p != record.PhaseThinking {
				t.Errorf("phase %q (run %q): no label (%q)", p, run, text)
			}
			if other, ok := seen[text]; ok && other != p {
				t.Errorf("phases %q and %q both read %q", other, p, text)
			}
			seen[text] = p
			if run != "" && (p == record.PhaseRecovering || p == record.PhaseContinuing) && !strings.Contains(text, run) {
				t.Errorf("phase %q does not name the run: %q", p, text)
			}
		}
	}
}
