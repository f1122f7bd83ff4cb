package store

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// Op puts its commands into a pipeline and returns how to read
// their results once the pipeline ran. With sha, scripts go as EVALSHA;
// without, as EVAL (the retry of an op whose script Redis did not have).
// Ops let one round trip carry the writes of several steps (see writer).
type Op func(ctx context.Context, p redis.Pipeliner, sha bool) (finish func() error)

// ScriptOp runs a call of s, args its command's arguments (s.Args,
// filled); read interprets its reply.
func ScriptOp(s *evalcmd.Script, args []any, read func(*redis.Cmd) error) Op {
	return func(ctx context.Context, p redis.Pipeliner, sha bool) func() error {
		c := s.Cmd(ctx, args, sha)
		_ = p.Process(ctx, c) // the error is c's, read by read
		return func() error { return read(c) }
	}
}

// Run runs ops in one pipeline, in order, and returns each op's error
// (see RunFollowed: ops are taken for the writes of one caller, each
// after the one before it).
func Run(ctx context.Context, rdb redis.UniversalClient, ops []Op) []error {
	return RunFollowed(ctx, rdb, ops, nil)
}

// RunFollowed runs ops in one pipeline, in order, and returns each op's
// error. followed[i] says that a later op of the round trip must run after
// op i (the same turn's next write); nil: every op but the last.
//
// A pipeline's commands each run on their own: a script call that Redis
// answers NOSCRIPT (a new or restarted Redis, SCRIPT FLUSH) does nothing,
// and the commands after it run all the same. So the scripts that a
// followed op calls are loaded first, in the same round trip (SCRIPT LOAD,
// registered scripts: evalcmd.Register), and a later write never overtakes
// an earlier one (a turn's journal save, intent or release ran
// before its event, sent again as EVAL in a second round trip). Ops whose
// script Redis still did not have (no later op of theirs followed) run
// again, in order, as EVAL in a second round trip.
//
// On a cluster the loads are not sent (a pipeline's commands for different
// nodes do not run in order anyway).
func RunFollowed(ctx context.Context, rdb redis.UniversalClient, ops []Op, followed []bool) []error {
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
		var loads []string
		for k, i := range idx {
			from := p.Len()
			fins[k] = ops[i](ctx, p, sha)
			if sha && (followed == nil && i < len(ops)-1 || followed != nil && followed[i]) {
				loads = scriptsOf(p, from, loads)
			}
		}
		if _, single := rdb.(*redis.Client); len(loads) > 0 && single {
			p = withLoads(ctx, rdb, p, loads)
		}
		_, _ = p.Exec(ctx) // every command's error is read by its op
		var again []int
		for k, i := range idx {
			errs[i] = fins[k]()
			if sha && IsNoScript(errs[i]) {
				again = append(again, i)
			}
		}
		idx = again
	}
	return errs
}

// cmdsOf is what a go-redis pipeline shows of its queued commands.
type cmdsOf interface{ Cmds() []redis.Cmder }

// scriptsOf appends to loads the registered scripts that p's commands from
// index from call by EVALSHA (once each).
func scriptsOf(p redis.Pipeliner, from int, loads []string) []string {
	q, ok := p.(cmdsOf)
	if !ok {
		return loads
	}
	for _, c := range q.Cmds()[from:] {
		args := c.Args()
		if len(args) < 2 || c.Name() != "evalsha" {
			continue
		}
		sha, _ := args[1].(string)
		if src, ok := evalcmd.Source(sha); ok && !slices.Contains(loads, src) {
			loads = append(loads, src)
		}
	}
	return loads
}

// withLoads returns a pipeline of SCRIPT LOAD of each of loads, then p's
// commands (the same commands: their ops read them).
func withLoads(ctx context.Context, rdb redis.UniversalClient, p redis.Pipeliner, loads []string) redis.Pipeliner {
	q, ok := p.(cmdsOf)
	if !ok {
		return p
	}
	lp := rdb.Pipeline()
	for _, src := range loads {
		lp.ScriptLoad(ctx, src) // its failure shows as the scripts' NOSCRIPT
	}
	_ = lp.BatchProcess(ctx, q.Cmds()...)
	return lp
}

func IsNoScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}
