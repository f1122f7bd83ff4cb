// Package evalcmd builds the EVALSHA command of a Lua script's call in one
// slice. go-redis's Script.EvalSha copies the caller's keys and arguments
// into a slice of its own, boxing each key and the script's hash on the
// way; a turn makes several script calls, so the caller here appends its
// keys and arguments once, into the command's own slice, where the hash
// and any constant key are boxed already.
package evalcmd

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script. It embeds go-redis's, for the calls that need
// none of this (Load, Hash, Run).
type Script struct {
	*redis.Script
	hash, src any // boxed once
}

// New returns the Script of src (registered: see Source).
func New(src string) *Script {
	s := redis.NewScript(Register(src))
	return &Script{Script: s, hash: s.Hash(), src: src}
}

// sources are the registered scripts' texts by hash.
var sources sync.Map // hash → text

// Register records src under its hash, for Source, and returns it: a caller
// that sends a script's EVALSHA in a pipeline may then load it first (SCRIPT
// LOAD). New registers its scripts; wrap the text of one made with
// redis.NewScript: redis.NewScript(evalcmd.Register(`…`)).
func Register(src string) string {
	sources.Store(redis.NewScript(src).Hash(), src)
	return src
}

// Source returns the text of the registered script whose hash is sha.
func Source(sha string) (string, bool) {
	v, ok := sources.Load(sha)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// Args returns the start of a call's command (EVALSHA, the hash, nkeys),
// with room for nkeys keys and nargs arguments: append the keys, then the
// arguments, then make the command with Cmd.
func (s *Script) Args(nkeys, nargs int) []any {
	a := make([]any, 3, 3+nkeys+nargs)
	a[0], a[1], a[2] = "evalsha", s.hash, nkeys
	return a
}

// Cmd returns the command of args (from Args): EVALSHA when sha, else EVAL
// with the script's text (for a Redis that does not have the script:
// NOSCRIPT), made in a copy, so that args stays EVALSHA's.
func (s *Script) Cmd(ctx context.Context, args []any, sha bool) *redis.Cmd {
	if !sha {
		args = slices.Clone(args)
		args[0], args[1] = "eval", s.src
	}
	c := redis.NewCmd(ctx, args...)
	if n, _ := args[2].(int); n > 0 {
		c.SetFirstKeyPos(3) // as go-redis's Eval does: the key routes it on a cluster
	}
	return c
}

// EvalShaOf returns the hash of the script that c calls, when c is an
// EVALSHA of a registered script (see Register).
func EvalShaOf(c redis.Cmder) (string, bool) {
	args := c.Args()
	if len(args) < 3 || c.Name() != "evalsha" {
		return "", false
	}
	sha, _ := args[1].(string)
	if _, ok := sources.Load(sha); !ok {
		return "", false
	}
	return sha, true
}

// ToEval makes c, an EVALSHA of a registered script not sent yet, the
// EVAL of the script's text, for a pipeline whose later commands must not
// run when this one could not (EVALSHA answers NOSCRIPT when Redis lost its
// scripts; EVAL runs, and leaves the script in Redis's cache for the
// pipeline's later EVALSHAs). It changes c's arguments in place, in the
// array c was made from: a caller that makes a command again from those
// arguments makes the same EVAL, which runs the same. It reports whether
// it did (false: c is not such an EVALSHA).
func ToEval(c redis.Cmder) bool {
	sha, ok := EvalShaOf(c)
	if !ok {
		return false
	}
	src, _ := Source(sha)
	args := c.Args()
	args[0], args[1] = "eval", src
	return true
}

// Processor is what runs a command: a client or a pipeline.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Call runs the call of args (from Args) on c as EVALSHA, and again as
// EVAL when Redis does not have the script, as go-redis's Script.Run does.
func (s *Script) Call(ctx context.Context, c Processor, args []any) *redis.Cmd {
	cmd := s.Cmd(ctx, args, true)
	_ = c.Process(ctx, cmd) // the error is cmd's
	if IsNoScript(cmd.Err()) {
		cmd = s.Cmd(ctx, args, false)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// IsNoScript reports whether err is Redis's answer to an EVALSHA of a
// script it does not have.
func IsNoScript(err error) bool {
	return err != nil && (err == redis.ErrNoScript || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
