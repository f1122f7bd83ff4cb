package integration

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A Letta outage of 40 s (nothing listens: every connection is refused)
// while a new chat's first message waits: its Letta conversation cannot be
// resolved, and the attempts back off (1s, 2s, 4s, … ) instead of spending
// the task's retries a second apart (26 attempts in 26 s, then "gave up").
// Letta comes back on the same address and the message is answered, once.
func TestLettaOutageNewChatRidesItOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // Letta is down: connections to addr are refused
	e.lettaURL = "http://" + addr
	e.startWorker("w1")
	agent := e.sim.CreateAgent("outage", nil)
	c := e.conv("outage")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})

	const outage = 40 * time.Second
	time.Sleep(outage)
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the outage's address was taken meanwhile: %v", err)
	}
	srv := &http.Server{Handler: e.sim}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })

	final, evs := e.waitFinal(c, res.TaskID, 90*time.Second)
	rec := e.record(res.TaskID)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %+v after a %v outage; %s; attempts: %s", final, outage, summarize(evs), describeAttempts(rec))
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("%d messages with the otid, want 1", n)
	}
	var waits []string
	for _, a := range rec.Attempts {
		if a.Outcome == record.OutcomeRetrying {
			if !strings.Contains(a.Error, "could not resolve the agent's Letta conversation") || a.RetryIn < time.Second {
				t.Errorf("attempt %d: %q, retry in %v", a.N, a.Error, a.RetryIn)
			}
			waits = append(waits, a.RetryIn.String())
		}
	}
	t.Logf("%d attempts; the retries waited %s", len(rec.Attempts), strings.Join(waits, ", "))
}
