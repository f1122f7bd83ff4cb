package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// ActionKind is what the chaos run does to the system at a moment.
type ActionKind string

// The actions of a schedule.
const (
	// KillWorker SIGKILLs the busiest worker and starts a replacement.
	KillWorker ActionKind = "kill"
	// TermWorker SIGTERMs the busiest worker (a graceful stop), waits for
	// it to exit and starts a replacement.
	TermWorker ActionKind = "term"
	// RestartRedis stops redis-server cleanly, keeps it down for the
	// outage, and starts it again on the same port with the same data.
	RestartRedis ActionKind = "redis"
)

// Action is one step of the schedule: Kind at At from the run's start.
type Action struct {
	Kind ActionKind
	At   time.Duration
}

func (a Action) String() string { return fmt.Sprintf("%s@%v", a.Kind, a.At) }

// ParseSchedule reads a schedule such as "kill@5s,term@15s,redis@30s"
// (kinds kill, term, redis; times are Go durations from the start), sorted
// by time. An empty string is an empty schedule.
func ParseSchedule(s string) ([]Action, error) {
	var out []Action
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kind, at, ok := strings.Cut(item, "@")
		if !ok {
			return nil, fmt.Errorf("schedule item %q: want kind@duration, e.g. kill@5s", item)
		}
		k := ActionKind(strings.ToLower(strings.TrimSpace(kind)))
		switch k {
		case KillWorker, TermWorker, RestartRedis:
		default:
			return nil, fmt.Errorf("schedule item %q: kind %q is not one of kill, term, redis", item, kind)
		}
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("schedule item %q: time %q is not a duration ≥ 0 (e.g. 5s)", item, at)
		}
		out = append(out, Action{Kind: k, At: d})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// FormatSchedule is the inverse of ParseSchedule.
func FormatSchedule(as []Action) string {
	parts := make([]string, len(as))
	for i, a := range as {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}
