package main

import (
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Turn is one numbered message of one chat, and what became of it.
type Turn struct {
	Chat, N int // N: 1..K, the order the chat sent it in
	Agent   string
	Conv    record.Conversation
	Text    string
	At      time.Duration // when it is enqueued, from the run's start

	Res queue.EnqueueResult // set once enqueued
}

// Name is how the report names a turn.
func (t *Turn) Name() string { return fmt.Sprintf("chat%d#%d", t.Chat, t.N) }

// turnDirective picks a turn's behaviour at the simulator: every turn is
// slow (it thinks for 0.5 to 3 s of real time, pings flowing), and about
// half meet a stream fault that the worker must continue from.
func turnDirective(r *rand.Rand, scale float64, mark string) string {
	sim := func(d time.Duration) string { return time.Duration(float64(d) / scale).String() }
	think := 500*time.Millisecond + time.Duration(r.Int63n(int64(2500*time.Millisecond)))
	fault := ""
	switch p := r.Intn(100); {
	case p < 15: // the stream stalls after two events: resumed
		fault = " stall=forever stall_after=2"
	case p < 30: // the connection drops after three events
		fault = " disconnect_after=3"
	case p < 40: // stalls at once, resume refused: the run is polled
		fault = " stall=forever stall_after=1 resume=410"
	case p < 50: // a tool call that takes a second
		fault = " tool=web_search tool_delay=" + sim(time.Second)
	}
	return fmt.Sprintf("[[sim think=%s answer=answer-%s%s]]", sim(think), mark, fault)
}

// planTurns makes chats × messages turns: chat c's messages are enqueued
// in their numbered order at random moments within the window.
func planTurns(r *rand.Rand, chats, messages int, window time.Duration, scale float64) [][]*Turn {
	out := make([][]*Turn, chats)
	for c := range chats {
		ats := make([]time.Duration, messages)
		for i := range ats {
			ats[i] = time.Duration(r.Int63n(int64(window) + 1))
		}
		slices.Sort(ats)
		for k := range messages {
			t := &Turn{Chat: c + 1, N: k + 1, At: ats[k]}
			t.Text = fmt.Sprintf("%s chat %d message #%d", turnDirective(r, scale, t.Name()), t.Chat, t.N)
			out[c] = append(out[c], t)
		}
	}
	return out
}
