package slack

import (
	"fmt"
	"testing"
	"time"
)

// clockPacer is a pacer on a clock the test moves.
func clockPacer(p Pace) (*pacer, *time.Time) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pc := newPacer(p)
	pc.now = func() time.Time { return now }
	return pc, &now
}

// TestPaceFinalsFirst: with 10 messages shown growing and a tier of 10 a
// minute, no growing edit is made (each would take a final's room) and all
// 10 final texts go at once; an 11th call waits for the window to slide.
func TestPaceFinalsFirst(t *testing.T) {
	pc, now := clockPacer(Pace{Update: Rate{10, time.Minute}})
	for i := range 10 {
		pc.shown(fmt.Sprintf("D%d/1.%d", i, i), true)
	}
	if wait := pc.take(update, pc.pace.Update, true, "D0/1.0", true); wait != growingRetry {
		t.Fatalf("a growing edit among 10 open messages: wait %v, want put off %v", wait, growingRetry)
	}
	for i := range 10 {
		msg := fmt.Sprintf("D%d/1.%d", i, i)
		if wait := pc.take(update, pc.pace.Update, false, msg, true); wait != 0 {
			t.Fatalf("final %d: wait %v, want at once", i, wait)
		}
		pc.shown(msg, false)
	}
	wait := pc.take(update, pc.pace.Update, false, "D0/1.0", true)
	if want := time.Minute + time.Minute/margin; wait != want {
		t.Fatalf("an 11th update in the minute: wait %v, want %v", wait, want)
	}
	*now = now.Add(wait)
	if wait := pc.take(update, pc.pace.Update, false, "D0/1.0", true); wait != 0 {
		t.Fatalf("once the window slid: wait %v", wait)
	}
}

// TestPaceLoneAnswerGrowsWithinHalfTheTier: one chat streaming alone may
// grow its answer until half the window is spent; its final text still
// finds room.
func TestPaceLoneAnswerGrowsWithinHalfTheTier(t *testing.T) {
	pc, now := clockPacer(Pace{Update: Rate{10, time.Minute}})
	grown := 0
	for range 20 {
		if pc.take(update, pc.pace.Update, true, "D1/1.1", true) == 0 {
			grown++
		}
		*now = now.Add(time.Second)
	}
	if grown != 5 {
		t.Fatalf("%d growing edits in 20 s, want 5 (half of 10 a minute)", grown)
	}
	if wait := pc.take(update, pc.pace.Update, false, "D1/1.1", true); wait != 0 {
		t.Fatalf("the final text: wait %v", wait)
	}
}

// TestPacePostsPerChannel: 5 posts in any 5 s per channel (plus the
// margin); another channel has its own room; a growing text leaves the
// last two posts of the window to final ones.
func TestPacePostsPerChannel(t *testing.T) {
	pc, now := clockPacer(DefaultPace)
	key := postMessage + " C1"
	for i := range 3 {
		if wait := pc.take(key, pc.pace.Post, true, "", false); wait != 0 {
			t.Fatalf("growing post %d: wait %v", i, wait)
		}
	}
	if wait := pc.take(key, pc.pace.Post, true, "", false); wait != growingRetry {
		t.Fatalf("a 4th growing post: wait %v, want put off", wait)
	}
	for i := range 2 {
		if wait := pc.take(key, pc.pace.Post, false, "", false); wait != 0 {
			t.Fatalf("final post %d: wait %v", i, wait)
		}
	}
	*now = now.Add(time.Second)
	if wait := pc.take(key, pc.pace.Post, false, "", false); wait != 5*time.Second+250*time.Millisecond-time.Second {
		t.Fatalf("a 6th post in the window: wait %v, want 4.25s", wait)
	}
	if wait := pc.take(postMessage+" C2", pc.pace.Post, false, "", false); wait != 0 {
		t.Fatalf("another channel: wait %v", wait)
	}
}

// TestPaceSlack429StopsTheMethod: Slack's Retry-After holds every call of
// that limit; growing texts are put off for the usual short while.
func TestPaceSlack429StopsTheMethod(t *testing.T) {
	pc, now := clockPacer(DefaultPace)
	if wait := pc.take(update, pc.pace.Update, false, "C1/1.1", true); wait != 0 {
		t.Fatal(wait)
	}
	pc.limited(update, 7*time.Second)
	if wait := pc.take(update, pc.pace.Update, false, "C1/1.1", true); wait != 7*time.Second {
		t.Fatalf("final after a 429: wait %v, want 7s", wait)
	}
	if wait := pc.take(update, pc.pace.Update, true, "C1/1.1", true); wait != growingRetry {
		t.Fatalf("growing after a 429: wait %v", wait)
	}
	*now = now.Add(7 * time.Second)
	if wait := pc.take(update, pc.pace.Update, false, "C1/1.1", true); wait != 0 {
		t.Fatalf("after the Retry-After: wait %v", wait)
	}
}

// TestPaceOpenMessagesAreLetGo: a message shown growing whose final text
// never needs an edit stops keeping room after openFor.
func TestPaceOpenMessagesAreLetGo(t *testing.T) {
	pc, now := clockPacer(Pace{Update: Rate{10, time.Minute}})
	for i := range 8 {
		pc.shown(fmt.Sprintf("D%d/1.%d", i, i), true)
	}
	if wait := pc.take(update, pc.pace.Update, true, "D9/1.9", true); wait == 0 {
		t.Fatal("a growing edit went while 8 finals were pending in a tier of 10")
	}
	*now = now.Add(openFor + time.Second)
	if wait := pc.take(update, pc.pace.Update, true, "D9/1.9", true); wait != 0 {
		t.Fatalf("after the open messages were let go: wait %v", wait)
	}
}
