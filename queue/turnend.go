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
	r := runEnd{D: d, Snap: t.st.Snapshot(), Tools: t.view.Tools(), FirstToken: t.view.FirstToken(), Finish: t.view.Finish}
	r.Cancel, r.CancelPhase = t.cx.Decided(d, t.view.Activity())
	if d.Outcome == continuation.Interrupted {
		r.Cause = t.leaseCause(ctx)
	}
	if d.Outcome == continuation.Rejected {
		r.ImageNote = t.imageRejected(d, "")
	}
	return t.end.ran(ctx, &r)
}
