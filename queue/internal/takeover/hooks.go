package takeover

import (
	"encoding/json"
	"time"

	"github.com/lettaq/lettaq/queue/internal/claim"
)

// What follows sets the registry's clocks and state by hand, for package queue's tests
// (takeover_test.go, takeover_runner_test.go) that drive a registry with Tick instead of its
// beats. Only queue's tests call them, but they are another package's tests: an
// export_test.go here would not reach them, so they are exported, and nothing but tests calls
// them.

// PrimeEligible makes the watcher eligible at its next good beat, as if it had beaten well
// for longer than TakeoverAfter.
func (tk *Registry) PrimeEligible() {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.base = time.Now().Add(-3 * tk.after)
	tk.epoch.lastOK.Store(int64(tk.now()))
	tk.lastTick = tk.now()
	tk.okSince = 1
	tk.beats = 1
}

// LastTickAgo sets the watcher's last good beat d ago (d past TakeoverAfter/2 is a gap in
// its beats).
func (tk *Registry) LastTickAgo(d time.Duration) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.lastTick = tk.now() - d
}

// AsRegistered puts r in the registry under the current epoch as if its registration's write
// had run (and was lost, or never reached Redis): a beat may write it back.
func (r *Registration) AsRegistered(entry claim.Entry, number int64) {
	entry.Queue, entry.Runner = r.at.Queue, r.rn.ID
	b, _ := json.Marshal(entry)
	tk := r.tk
	tk.mu.Lock()
	defer tk.mu.Unlock()
	r.epoch, r.entry, r.number = tk.epoch, b, number
	tk.turns[r] = struct{}{}
}

// BeatAgo sets the last good beat of r's epoch d ago (d past TakeoverAfter/2: TakenOver asks
// Redis).
func (r *Registration) BeatAgo(d time.Duration) {
	r.epoch.lastOK.Store(int64(r.tk.now() - d))
}

// Tombstoned reports whether r's epoch was found tombstoned.
func (r *Registration) Tombstoned() bool { return r.epoch != nil && r.epoch.dead.Load() }
