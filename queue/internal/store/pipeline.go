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
// and the commands after it run all the same. So a followed op's script
// calls never go as a bare EVALSHA of a script that the pipeline has not
// sent yet: the first such call of each script goes as EVAL with the
// script's text (which runs it, NOSCRIPT or not, and leaves it in Redis's
// cache), and the later calls of the round trip, which Redis runs after
// it on the same connection, as EVALSHA. A later write thus never
// overtakes an earlier one (a turn's journal save, intent or release ran
// before its event), and the text goes once per script and round trip,
// in the call itself rather than in a SCRIPT LOAD before it. Ops whose
// script Redis still did not have (no later op of theirs followed) run
// again, in order, as EVAL in a second round trip.
//
// On a cluster the calls stay EVALSHA (a pipeline's commands for
// different nodes do not run in order anyway).
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
		_, single := rdb.(*redis.Client)
		var sent []string // the hashes of the scripts the pipeline sent as EVAL
		for k, i := range idx {
			from := p.Len()
			fins[k] = ops[i](ctx, p, sha)
			if sha && single && (followed == nil && i < len(ops)-1 || followed != nil && followed[i]) {
				sent = evalFirst(p, from, sent)
			}
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

// evalFirst makes each EVALSHA among p's commands from index from, of a
// registered script whose hash is not in sent, the EVAL of its text (in
// place: see evalcmd.ToEval), and returns sent with those hashes.
func evalFirst(p redis.Pipeliner, from int, sent []string) []string {
	q, ok := p.(cmdsOf)
	if !ok {
		return sent
	}
	for _, c := range q.Cmds()[from:] {
		sha, ok := evalcmd.EvalShaOf(c)
		if !ok || slices.Contains(sent, sha) {
			continue
		}
		if evalcmd.ToEval(c) {
			sent = append(sent, sha)
		}
	}
	return sent
}

func IsNoScript(err error) bool {
	return err != nil && strings.Contains(err.Error(), "NOSCRIPT")
}
