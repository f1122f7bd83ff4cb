package attempt

import (
	"context"
	"log/slog"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/cancel"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/takeover"
)

// detached is the attempt's context without its cancellation, for writes
// that must not end with the
func (t *Pipeline) detached() context.Context { return context.WithoutCancel(t.Actx) }

// Pipeline is one attempt of one turn, as the steps it goes through: its
// start (the reads, the gates: its line, an open approval, a cancel, the
// takeover fence), its run at Letta (lettaRun) and its end (completer).
type Pipeline struct {
	ID
	*recordWriter            // its record's saves (Save, saveLater) and its Redis failures (RedisFailed)
	End           *completer // applies how the attempt ends
	W             *Parts
	Logger        *slog.Logger // every line carries task_id, otid and the run_id known then
	Obs           observed     // the worker's Observer, as this attempt tells it
	IDs           *IDs
	Progress      *progress.Queue // progress events, written off the stream's reader

	Line       *line.Place // its place in its chat's line: the lease, the release, merged messages, the park
	TextBudget replyBudget // the progress text it may write to the reply stream

	Pre *store.StartReads // read before the attempt runs (until it makes its run)
	Cx  cancel.Turn       // its cancel, if one is asked for (views.go)
	Ap  approval.Turn     // its approvals: the gate, an answer turn's request (gates.go, views.go)

	LettaRun *lettaRun // its run at Letta, once prepared (kept here, not in a frame: see Parts.Process)

	Actx context.Context // the attempt's context (Asynq's): see detached

	// Takeover (queue/internal/takeover).
	Rn fence.Runner           // the runner: which task runs the attempt, fenced, gone (fence.Runner.Fence ends actx)
	Tk *takeover.Registration // its registration in the worker's registry (never nil but in tests)

	Jr *journal.Attempt // the turn's record with this attempt in it, its lock and saves
}
