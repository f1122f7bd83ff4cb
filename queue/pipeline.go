package queue

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// pipelineOp puts its commands into a pipeline and returns how to read
// their results once the pipeline ran. With sha, scripts go as EVALSHA;
// without, as EVAL (the retry of an op whose script Redis did not have).
// Ops let one round trip carry the writes of several steps (see writer).
type pipelineOp func(ctx context.Context, p redis.Pipeliner, sha bool) (finish func() error)

// scriptOp runs a call of s, args its command's arguments (s.Args,
// filled); read interprets its reply.
func scriptOp(s *evalcmd.Script, args []any, read func(*redis.Cmd) error) pipelineOp {
	return func(ctx context.Context, p redis.Pipeliner, sha bool) func() error {
		c := s.Cmd(ctx, args, sha)
		_ = p.Process(ctx, c) // the error is c's, read by read
		return func() error { return read(c) }
	}
}

// runOps runs ops in one pipeline, in order, and returns each op's error.
// Ops whose script Redis did not have (NOSCRIPT: a new or restarted Redis)
// run again, in order, as EVAL in a second round trip.
func runOps(ctx context.Context, rdb redis.UniversalClient, ops []pipelineOp) []error {
	errs := make([]error, len(ops))
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	for _, sha := range []bool{true, false} {
		if len(idx) == 0 {
			break
		}
		p := rdb.Pipeline()
		fins := make([]func() error, len(idx))
		for k, i := range idx {
			fins[k] = ops[i](ctx, p, sha)
		}
		_, _ = p.Exec(ctx) // every command's error is read by its op
		var again []int
		for k, i := range idx {
			errs[i] = fins[k]()
			if sha && isNoScript(errs[i]) {
				again = append(again, i)
			}
		}
		idx = again
	}
	return errs
}

func isNoScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}
