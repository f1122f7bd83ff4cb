package continuation_test

import (
	"context"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

// runTurn runs a turn to its decision, waiting for the agent between the
// runner's calls as queue's handler does.
func runTurn(ctx context.Context, r *continuation.Runner, tu continuation.Turn, st *agentclient.StreamState, h continuation.Hooks) (d continuation.Result) {
	for r.Run(ctx, &tu, st, &h, &d) {
		st.Wait()
	}
	return d
}
