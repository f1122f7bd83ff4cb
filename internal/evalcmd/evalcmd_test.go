package evalcmd_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
	"github.com/lettaq/lettaq/internal/testredis"
)

var incrBy = evalcmd.New(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)

var noKeys = evalcmd.New(`return ARGV[1] .. ARGV[2]`)

// The command is go-redis's own: the same arguments as Script.EvalSha and
// Script.Eval send, with keys and without.
func TestCmdIsGoRedisCommand(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: a pipeline only queues
	defer rdb.Close()
	for _, c := range []struct {
		s    *evalcmd.Script
		keys []string
		args []any
	}{
		{incrBy, []string{"k"}, []any{int64(7)}},
		{noKeys, nil, []any{"a", "b"}},
	} {
		cmd := c.s.Args(len(c.keys), len(c.args))
		for _, k := range c.keys {
			cmd = append(cmd, k)
		}
		cmd = append(cmd, c.args...)
		p := rdb.Pipeline()
		for _, sha := range []bool{true, false} {
			want := c.s.Eval(ctx, p, c.keys, c.args...).Args()
			if sha {
				want = c.s.EvalSha(ctx, p, c.keys, c.args...).Args()
			}
			if got := c.s.Cmd(ctx, cmd, sha).Args(); fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
				t.Errorf("sha %v: %#v, want %#v", sha, got, want)
			}
		}
		if cmd[0] != "evalsha" {
			t.Errorf("Cmd without sha changed the caller's slice: %v", cmd[:2])
		}
	}
}

// Call sends EVALSHA; when Redis does not have the script (a new or
// restarted Redis, a SCRIPT FLUSH) it sends the call again as EVAL, once,
// which loads the script, so that the next call is one EVALSHA again.
func TestCallAfterScriptFlush(t *testing.T) {
	servers := map[string]string{"miniredis": miniredis.RunT(t).Addr()}
	if !testing.Short() {
		// A Redis of the test's own: SCRIPT FLUSH is not for the shared one.
		servers["redis"] = testredis.StartPersistent(t).Addr
	}
	for name, addr := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			var h nameHook
			rdb.AddHook(&h)
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			h.reset()
			for i, want := range []int64{2, 4, 6} {
				n, err := incrBy.Call(ctx, rdb, append(incrBy.Args(1, 1), "evalcmd:n", 2)).Int64()
				if err != nil || n != want {
					t.Fatalf("call %d: %d, %v; want %d", i, n, err, want)
				}
			}
			if got := fmt.Sprint(h.reset()); got != "[evalsha eval evalsha evalsha]" {
				t.Errorf("commands %s", got)
			}
			// A script error is the call's error, not a second try.
			_, err := incrBy.Call(ctx, rdb, append(incrBy.Args(1, 1), "evalcmd:n", "x")).Result()
			if err == nil || evalcmd.IsNoScript(err) {
				t.Errorf("INCRBY of x: %v", err)
			}
			if got := fmt.Sprint(h.reset()); got != "[evalsha]" {
				t.Errorf("commands %s", got)
			}
		})
	}
}

// A call's command is one slice, made by Args, and the Cmd: two
// allocations when the keys and arguments are boxed already (go-redis's
// Script.EvalSha copies them into a slice of its own and boxes the keys
// and the hash again).
func TestCmdAllocations(t *testing.T) {
	ctx := context.Background()
	var key, arg any = "evalcmd:k", "v"
	var sink *redis.Cmd
	n := testing.AllocsPerRun(1000, func() {
		sink = incrBy.Cmd(ctx, append(incrBy.Args(1, 1), key, arg), true)
	})
	if n != 2 {
		t.Errorf("%v allocations per command, want 2", n)
	}
	_ = sink
}

// nameHook records the names of the commands a client sends.
type nameHook struct {
	mu    sync.Mutex
	names []string
}

func (h *nameHook) reset() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names
	h.names = nil
	return n
}

func (h *nameHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *nameHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *nameHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ToEval makes an EVALSHA of a registered script the EVAL that Cmd without
// sha makes (go-redis's own: see TestCmdIsGoRedisCommand), which runs on a
// Redis without the script; EvalShaOf names the script; a command that is
// no such EVALSHA stays as it is.
func TestToEval(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	args := append(incrBy.Args(1, 1), "k", int64(7))
	c := incrBy.Cmd(ctx, args, true)
	if sha, ok := evalcmd.EvalShaOf(c); !ok || sha != incrBy.Hash() {
		t.Fatalf("EvalShaOf: %q %v, want %q", sha, ok, incrBy.Hash())
	}
	want := fmt.Sprintf("%#v", incrBy.Cmd(ctx, args, false).Args())
	if !evalcmd.ToEval(c) {
		t.Fatal("ToEval did not")
	}
	if got := fmt.Sprintf("%#v", c.Args()); got != want {
		t.Errorf("after ToEval: %s, want %s", got, want)
	}
	if _, ok := evalcmd.EvalShaOf(c); ok || evalcmd.ToEval(c) {
		t.Error("an EVAL taken for an EVALSHA")
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Process(ctx, c); err != nil || c.Val() != int64(7) {
		t.Errorf("the EVAL on a Redis without the script: %v %v", c.Val(), err)
	}
	for _, other := range []redis.Cmder{
		redis.NewCmd(ctx, "evalsha", "0123456789012345678901234567890123456789", 0), // not registered
		redis.NewCmd(ctx, "get", "k"),
	} {
		before := fmt.Sprint(other.Args())
		if _, ok := evalcmd.EvalShaOf(other); ok || evalcmd.ToEval(other) || fmt.Sprint(other.Args()) != before {
			t.Errorf("%v taken for a registered script's EVALSHA", before)
		}
	}
}
