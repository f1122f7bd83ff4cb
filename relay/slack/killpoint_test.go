package slack_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/internal/killtest"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// slackPlatform is a fake Slack for one relay run, the relay pointed at it.
func slackPlatform(f *slackfake.Fake, partLimit int, extra ...string) killtest.Platform {
	env := []string{"LETTAQ_SLACK_BOT_TOKEN=" + f.Token(), "LETTAQ_SLACK_SIGNING_SECRET=" + f.SigningSecret(),
		"LETTAQ_SLACK_API_URL=" + f.APIURL(), "LETTAQ_RELAY_AGENT_ID=" + agent, "LETTAQ_HTTP_ADDR=127.0.0.1:0"}
	if partLimit > 0 {
		env = append(env, fmt.Sprintf("LETTAQ_SLACK_PART_LIMIT=%d", partLimit))
	}
	return killtest.Platform{
		Fake: f.Platform, Conv: relayslack.Conversation("C1", "1699999999.000001"), Close: f.Stop,
		Env: append(env, extra...),
	}
}

// TestSlackKillAtEveryStepShowsEachMessageOnce is the relay's kill-point
// test against the Slack adapter and a fake Slack that enforces Slack's
// rules: killed at every step of a quick answer, an answer streamed into
// three messages, and an approval request (the other turn kinds run
// against the fake platform: the relay's part of them is the same), each
// chat ends showing its messages, each posted once but in the one window.
func TestSlackKillAtEveryStepShowsEachMessageOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the relay binary about a hundred times")
	}
	var subset []killtest.Scenario
	for _, sc := range killtest.Scenarios() {
		if slices.Contains([]string{"quick", "streamed-parts", "approval"}, sc.Name) {
			subset = append(subset, sc)
		}
	}
	results := killtest.Run(t, subset, func(t *testing.T) killtest.Platform {
		return slackPlatform(slackfake.New(slackfake.Options{}), killtest.PartLimit)
	})
	var runs, windows int
	for _, r := range results {
		runs, windows = runs+r.Runs, windows+r.Windows
	}
	t.Logf("%d kill runs against Slack; %d landed in the window (killed after Slack's accept, before the ts's save)", runs, windows)
}

// TestSlackCallsPerAnsweredTurn counts Slack's Web API calls for one
// answered turn of each kind, the relay at its default pace (an edit a
// second): a quick answer, a 2,000-character answer streamed over about
// two seconds, and an approval request. Each shows its messages once, and
// no call meets a 429.
func TestSlackCallsPerAnsweredTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the relay binary")
	}
	ev := func(typ record.EventType, f func(*record.ReplyEvent)) record.ReplyEvent {
		e := record.ReplyEvent{Type: typ, TaskID: "turn1", Otid: "otid1", RunID: "run1"}
		if f != nil {
			f(&e)
		}
		return e
	}
	long := strings.Repeat("Slack streams this answer in one message, edited as it grows. ", 33)[:2000]
	streamed := []record.ReplyEvent{ev(record.EventAccepted, func(e *record.ReplyEvent) { e.Phase = record.PhaseQueued }),
		ev(record.EventPhase, func(e *record.ReplyEvent) { e.Phase = record.PhaseStreaming })}
	for i := 0; i < len(long); i += 40 { // 50 deltas, 40 ms apart
		streamed = append(streamed, ev(record.EventAnswerDelta, func(e *record.ReplyEvent) { e.Text = long[i:min(i+40, len(long))] }))
	}
	streamed = append(streamed, ev(record.EventAnswer, func(e *record.ReplyEvent) { e.Text = long }))
	byName := map[string]killtest.Scenario{}
	for _, sc := range killtest.Scenarios() {
		byName[sc.Name] = sc
	}
	for _, sc := range []killtest.Scenario{byName["quick"], {Name: "streamed-2000", Events: streamed, Want: []string{long}}, byName["approval"]} {
		f := slackfake.New(slackfake.Options{})
		start := time.Now()
		calls := killtest.Once(t, sc, slackPlatform(f, 0, "LETTAQ_RELAY_EDIT_EVERY=1s"))
		ok, limited := f.API.Counts()
		delete(ok, "auth.test") // the relay's start, not the turn
		if len(limited) != 0 {
			t.Errorf("%s: calls refused with 429: %v", sc.Name, limited)
		}
		total := 0
		for _, n := range ok {
			total += n
		}
		t.Logf("%s: %d Slack calls for the answered turn %v (%d fake-platform calls), %d message(s) shown, in %v",
			sc.Name, total, ok, len(calls), len(f.Platform.Messages(slackPlatform(f, 0).Conv)), time.Since(start).Round(100*time.Millisecond))
	}
}
