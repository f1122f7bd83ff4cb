package integration

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
)

// TestThinkingTurnStackDepth: the goroutine of a thinking turn waits for
// its stream shallow enough for the Go runtime to halve its stack twice.
// The handler grows its stack to 16 KiB before it opens the stream, and a
// GC only halves a stack of which less than a quarter is in use, counting
// an 800 byte guard: to come down to 4 KiB the goroutine must wait less
// than 2048-800 = 1248 bytes deep, so the stream parks and the handler
// waits right under processTask (see queue's processTask).
//
// A worker process with GOTRACEBACK=system is sent SIGQUIT while its turn
// thinks; the runtime's dump gives each frame's sp and fp, and the depth is
// from the first frame's sp to the last frame's fp. Under the race detector
// frames are bigger (and the guard twice as large, so the stack is never
// halved that far): there the bound only guards against the frames growing
// back. History: 7.5 KB deep before the handler was split, 4.0 KB after,
// 2.7 KB with small frames, 0.9 KB parked (without the race detector).
func TestThinkingTurnStackDepth(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	bound := 2048 - 800 - 64 // 64: the dump's depth is the runtime's within a few words
	if raceEnabled {
		bound = 2000
	}
	for _, mode := range []queue.ThreadMode{queue.ThreadAgent, queue.ThreadConversation} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, withThreadMode(mode))
			agent := e.sim.CreateAgent("deep", nil)
			// The dump may catch the goroutine reading a ping: try again.
			for try := 1; ; try++ {
				depth, block, ok := e.thinkingTurnDepth(agent, mode, try)
				if !ok {
					if try < 5 {
						t.Logf("try %d: the dump did not catch the handler waiting on its stream", try)
						continue
					}
					t.Fatalf("the dump never caught the thinking turn's handler waiting on its stream; last:\n%s", block)
				}
				t.Logf("the thinking turn's handler waits %d bytes deep (bound %d)", depth, bound)
				if depth >= bound {
					t.Fatalf("the thinking turn's handler waits %d bytes deep, want < %d:\n%s", depth, bound, block)
				}
				return
			}
		})
	}
}

var (
	goroutineHeader = regexp.MustCompile(`(?m)^goroutine \d+ .*\[([^\]]*)\]:$`)
	frameSPFP       = regexp.MustCompile(`fp=0x([0-9a-f]+) sp=0x([0-9a-f]+)`)
)

// thinkingTurnDepth runs a thinking turn on a worker process, dumps the
// process's goroutines once the turn streams, and returns how deep the
// turn's handler goroutine waits; ok is false when the dump did not catch
// it waiting on the stream (block is then the dump, or the goroutine's).
func (e *env) thinkingTurnDepth(agent string, mode queue.ThreadMode, try int) (depth int, block string, ok bool) {
	e.t.Helper()
	p := e.spawnWorker(fmt.Sprintf("deep-%d", try), "GOTRACEBACK=system", envThreadMode+"="+string(mode))
	c := e.conv("deep")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: fmt.Sprintf("deep-%d", try),
		Text: fmt.Sprintf("[[sim think=%s answer=deep]] think", simDur(3*time.Second))})
	e.waitAttempt(res.TaskID, 1, "streaming")
	p.signal(syscall.SIGQUIT)
	p.wait(e.t, 20*time.Second)
	dump := p.out.String()
	for _, b := range splitGoroutines(dump) {
		if !strings.Contains(b, "queue.(*Worker).processTask(") {
			continue
		}
		// Waiting (not running) for the parked stream: "IO wait" on the
		// connection.
		m := goroutineHeader.FindStringSubmatch(b)
		if m == nil || strings.HasPrefix(m[1], "running") || strings.HasPrefix(m[1], "runnable") ||
			strings.HasPrefix(m[1], "syscall") || !strings.Contains(b, "agentclient.(*StreamState).WaitParked(") {
			return 0, b, false
		}
		frames := frameSPFP.FindAllStringSubmatch(b, -1)
		if len(frames) < 2 {
			return 0, b, false
		}
		sp, err1 := strconv.ParseUint(frames[0][2], 16, 64)
		fp, err2 := strconv.ParseUint(frames[len(frames)-1][1], 16, 64)
		if err1 != nil || err2 != nil || fp <= sp {
			e.t.Fatalf("unreadable frame addresses in:\n%s", b)
		}
		return int(fp - sp), b, true
	}
	return 0, tail(dump, 8000), false
}

// splitGoroutines splits a goroutine dump into its goroutines.
func splitGoroutines(dump string) []string {
	idx := goroutineHeader.FindAllStringIndex(dump, -1)
	out := make([]string, 0, len(idx))
	for i, loc := range idx {
		end := len(dump)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		out = append(out, dump[loc[0]:end])
	}
	return out
}
