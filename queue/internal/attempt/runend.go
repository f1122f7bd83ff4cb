package attempt

import (
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/tools"
	"github.com/lettaq/lettaq/queue/record"
)

// runEnd is what the run at Letta leaves for its attempt's end (lettaRun.finish
// gathers it): the continuation's decision and what the stream saw.
type runEnd struct {
	D          continuation.Result
	Snap       agentclient.Snapshot
	Tools      []*tools.Call // the run's tool calls as the chat was told of them
	FirstToken time.Time     // the answer's first token (zero: none)
	// Cancel is the turn's cancel, asked before the run was decided (nil:
	// none), and CancelPhase the phase it came in.
	Cancel      *record.CancelRecord
	CancelPhase string
	// Cause is what interrupted an Interrupted run (the lease's loss; nil:
	// the decision's error).
	Cause error
	// ImageNote prefixes the reason of a rejected message with images
	// ("" none: see lettaRun.imageRejected).
	ImageNote string
	// Finish ends the chat's live view of the run once the end is decided
	// (live.Stream.Finish: answered flushes the answer's last deltas).
	Finish func(answered bool)
}
