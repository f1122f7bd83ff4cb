package main

import (
	"math/rand"
	"strings"
	"testing"
	"time"
)

func TestOrderViolations(t *testing.T) {
	for _, tc := range []struct {
		arrivals []int
		want     int
	}{
		{nil, 0},
		{[]int{1, 2, 3, 4}, 0},
		{[]int{1, 3, 4}, 0},       // a missing message is not a reordering
		{[]int{2, 1, 3}, 1},       // 1 after 2
		{[]int{3, 1, 2}, 2},       // 1 and 2 after 3
		{[]int{1, 2, 1, 3}, 0},    // a duplicate is counted apart
		{[]int{1, 3, 2, 4, 2}, 1}, // 2 once, late; its duplicate not again
	} {
		if got := OrderViolations(tc.arrivals); got != tc.want {
			t.Errorf("OrderViolations(%v) = %d, want %d", tc.arrivals, got, tc.want)
		}
	}
}

func TestDuplicateStats(t *testing.T) {
	mx, dup := DuplicateStats(map[string]int{"a": 1, "b": 2, "c": 0, "d": 3})
	if mx != 3 || dup != 2 {
		t.Errorf("DuplicateStats = max %d, %d duplicated; want 3, 2", mx, dup)
	}
	if mx, dup := DuplicateStats(map[string]int{"a": 1}); mx != 1 || dup != 0 {
		t.Errorf("one otid once: max %d, %d duplicated", mx, dup)
	}
}

func TestTakeover(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	kill := at(10)
	for _, tc := range []struct {
		name     string
		attempts []AttemptSpan
		want     time.Duration
		ok       bool
	}{
		{"killed mid-attempt, continued by w2", []AttemptSpan{{"w1", at(5), time.Time{}}, {"w2", at(72), at(74)}}, 62 * time.Second, true},
		{"attempt ended after the kill (graceful)", []AttemptSpan{{"w1", at(5), at(12)}, {"w2", at(12), at(14)}}, 2 * time.Second, true},
		{"the worker's attempt ended before the kill", []AttemptSpan{{"w1", at(1), at(3)}, {"w2", at(3), at(20)}}, 0, false},
		{"another worker's turn", []AttemptSpan{{"w2", at(5), time.Time{}}, {"w3", at(70), at(71)}}, 0, false},
		{"started after the kill", []AttemptSpan{{"w1", at(11), at(12)}}, 0, false},
		{"never continued", []AttemptSpan{{"w1", at(5), time.Time{}}}, 0, false},
		{"an earlier failed attempt, then killed", []AttemptSpan{{"w2", at(1), at(2)}, {"w1", at(3), time.Time{}}, {"w3", at(75), at(76)}}, 65 * time.Second, true},
	} {
		got, ok := Takeover(tc.attempts, "w1", kill)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: Takeover = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSpreadOf(t *testing.T) {
	s := SpreadOf([]time.Duration{5 * time.Second, time.Second, 3 * time.Second})
	if s != (Spread{N: 3, Min: time.Second, Median: 3 * time.Second, Max: 5 * time.Second}) {
		t.Errorf("odd: %+v", s)
	}
	s = SpreadOf([]time.Duration{4 * time.Second, time.Second, 2 * time.Second, 10 * time.Second})
	if s.Median != 3*time.Second || s.Min != time.Second || s.Max != 10*time.Second {
		t.Errorf("even: %+v", s)
	}
	if s := SpreadOf(nil); s.N != 0 || s.String() != "no sample" {
		t.Errorf("empty: %+v %q", s, s.String())
	}
}

func TestParseSchedule(t *testing.T) {
	got, err := ParseSchedule(" redis@30s, kill@5s,term@1m ")
	if err != nil {
		t.Fatal(err)
	}
	if s := FormatSchedule(got); s != "kill@5s,redis@30s,term@1m0s" {
		t.Errorf("parsed and sorted: %s", s)
	}
	if got, err := ParseSchedule(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
	for in, want := range map[string]string{
		"kill":       "want kind@duration",
		"stop@5s":    `kind "stop" is not one of kill, term, redis`,
		"kill@soon":  `time "soon" is not a duration`,
		"kill@-5s":   `time "-5s" is not a duration ≥ 0`,
		"kill@5s,x@": `schedule item "x@"`,
	} {
		if _, err := ParseSchedule(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseSchedule(%q) = %v, want an error with %q", in, err, want)
		}
	}
}

func TestParseVmHWM(t *testing.T) {
	status := "Name:\tworker\nVmPeak:\t  900000 kB\nVmHWM:\t   24576 kB\nVmRSS:\t   20000 kB\n"
	n, err := parseVmHWM(strings.NewReader(status))
	if err != nil || n != 24576*1024 {
		t.Errorf("parseVmHWM = %d, %v; want %d", n, err, 24576*1024)
	}
	if _, err := parseVmHWM(strings.NewReader("Name:\tx\n")); err == nil {
		t.Error("no VmHWM line: no error")
	}
	if _, err := parseVmHWM(strings.NewReader("VmHWM:\t 12 MB\n")); err == nil || !strings.Contains(err.Error(), "want <n> kB") {
		t.Errorf("bad unit: %v", err)
	}
}

func TestFinalOutcome(t *testing.T) {
	for o, want := range map[string]bool{"": false, "retrying": false, "still_running": false, "busy": false,
		"answered": true, "failed": true, "not_admitted": true, "canceled": true} {
		if got := finalOutcome(o); got != want {
			t.Errorf("finalOutcome(%q) = %v, want %v", o, got, want)
		}
	}
}

func TestReportFailuresAndTable(t *testing.T) {
	ok := &Report{Config: DefaultConfig(), Enqueued: 4, Answered: 3, Failed: map[string]int{"error: bad input": 1}, MaxPerOtid: 1,
		Kills: 1, Takeover: SpreadOf([]time.Duration{61 * time.Second}), Workers: []WorkerReport{{"w1", 25 << 20, "SIGKILL"}}}
	if f := ok.Failures(); len(f) != 0 {
		t.Errorf("a run with a failed turn (not lost) fails: %v", f)
	}
	table := ok.Table()
	for _, want := range []string{"| turns enqueued | 4 |", "| failed (causes) | 1 (1× error: bad input) |", "| **lost** (no final event, no journal outcome) | 0 |",
		"1m1s / 1m1s / 1m1s (1 turns)", "w1 25 MiB (SIGKILL)", "| kills done | 1 SIGKILL, 0 SIGTERM |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	bad := &Report{Lost: []string{"chat1#2"}, MaxPerOtid: 2, Duplicated: 1, OrderViolations: 1, ChatsOutOfOrder: 1}
	f := strings.Join(bad.Failures(), "\n")
	for _, want := range []string{"1 turns lost: chat1#2", "1 otids reached the agent more than once (at most 2 times)", "1 messages reached the agent out of order in 1 chats"} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q: %s", want, f)
		}
	}
}

func TestPlanTurns(t *testing.T) {
	chats := planTurns(rand.New(rand.NewSource(3)), 3, 5, 10*time.Second, simScale)
	if len(chats) != 3 {
		t.Fatalf("%d chats", len(chats))
	}
	for _, chat := range chats {
		for k, tu := range chat {
			if tu.N != k+1 || tu.At < 0 || tu.At > 10*time.Second || (k > 0 && tu.At < chat[k-1].At) {
				t.Errorf("%s at %v: not in order within the window", tu.Name(), tu.At)
			}
			if !strings.HasPrefix(tu.Text, "[[sim think=") || !strings.Contains(tu.Text, "answer=answer-"+tu.Name()) {
				t.Errorf("%s: text %q", tu.Name(), tu.Text)
			}
		}
	}
}
