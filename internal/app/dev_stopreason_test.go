package app

import (
	"strings"
	"testing"
)

// A run that ends with a failure stop reason fails the turn in dev mode:
// enqueue --wait exits non-zero naming the reason, on the streaming path and
// on the follow path (the stream cut after two events).
func TestDevFailureStopReasonExitsNonZero(t *testing.T) {
	r := startDevWorker(t)
	for _, text := range []string{
		"[[sim stop=max_tokens_exceeded]] hello there",
		"[[sim stop=max_tokens_exceeded disconnect_after=2]] hello there",
	} {
		code, out, errOut := enqueue(t, r, "--wait", "--timeout=60s", text)
		if code != ExitFailed || !strings.Contains(out+errOut, "max_tokens_exceeded") {
			t.Errorf("%s: exit %d (want %d, the turn failed)\nstdout %q\nstderr %q", text, code, ExitFailed, out, errOut)
		}
	}
}
