package queue

import (
	"context"

	"github.com/lettaq/lettaq/continuation"
)

// finish ends the attempt with its run's decision d: what the run leaves
// (runEnd) goes to the attempt's completer, which decides how the attempt
// ends (endOf) and applies it.
func (t *turn) finish(ctx context.Context, d continuation.Result) error {
	if t.tk.TakenOver(ctx) {
		return t.tk.EndTakenOver() // fenced: another worker continues the turn
	}
	r := runEnd{D: d, Snap: t.letta.st.Snapshot(), Tools: t.letta.view.Tools(), FirstToken: t.letta.view.FirstToken(), Finish: t.letta.view.Finish}
	r.Cancel, r.CancelPhase = t.cx.Decided(d, t.letta.view.Activity())
	if d.Outcome == continuation.Interrupted {
		r.Cause = t.letta.leaseCause(ctx)
	}
	if d.Outcome == continuation.Rejected {
		r.ImageNote = t.letta.imageRejected(d, "")
	}
	return t.end.ran(ctx, &r)
}
