package queue

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// newUnconnectedWorker makes a worker of cfg on a Redis address nothing
// listens on (NewWorker does not connect) and closes its clients at the
// test's end.
func newUnconnectedWorker(t *testing.T, cfg WorkerConfig) *Worker {
	t.Helper()
	cfg.Redis = asynq.RedisClientOpt{Addr: "127.0.0.1:1"}
	w, err := NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.closeRedis)
	return w
}

// A WorkerConfig whose groups are left zero gets the defaults each group's
// doc names.
func TestWorkerConfigZeroGroupsTakeTheDefaults(t *testing.T) {
	w := newUnconnectedWorker(t, WorkerConfig{})
	sc := w.ServerConfig()
	if sc.TaskCheckInterval != 100*time.Millisecond || sc.DelayedTaskCheckInterval != time.Second {
		t.Errorf("Asynq's check intervals: %v and %v, want 100ms and 1s", sc.TaskCheckInterval, sc.DelayedTaskCheckInterval)
	}
	wantTiming := WorkerTiming{TaskCheckInterval: 100 * time.Millisecond, DelayedTaskCheckInterval: time.Second,
		HeartbeatInterval: 4 * time.Second, StuckRetryDelay: time.Second}
	if w.cfg.Timing != wantTiming {
		t.Errorf("Timing: %+v, want %+v", w.cfg.Timing, wantTiming)
	}
	if want := (ApprovalRules{Policy: ApprovalWait, Timeout: 24 * time.Hour}); w.cfg.Approvals != want {
		t.Errorf("Approvals: %+v, want %+v", w.cfg.Approvals, want)
	}
	if want := (FastTakeover{After: 5 * time.Second, Beat: time.Second}); w.cfg.Takeover != want || w.tk == nil {
		t.Errorf("Takeover: %+v (registry %v), want %+v and a registry", w.cfg.Takeover, w.tk != nil, want)
	}
}

// Values set in the groups are kept, within their bounds: under ordering the
// delayed-task check is at most a second, a takeover beat at most a third
// of After, and a negative After turns takeover off.
func TestWorkerConfigGroupsKeepTheirValues(t *testing.T) {
	w := newUnconnectedWorker(t, WorkerConfig{
		Timing:    WorkerTiming{TaskCheckInterval: 20 * time.Millisecond, DelayedTaskCheckInterval: 5 * time.Second},
		Approvals: ApprovalRules{Policy: ApprovalDeny, Timeout: time.Hour},
		Takeover:  FastTakeover{After: 1500 * time.Millisecond, Beat: time.Second},
	})
	if got := w.ServerConfig(); got.TaskCheckInterval != 20*time.Millisecond || got.DelayedTaskCheckInterval != time.Second {
		t.Errorf("under ordering: check intervals %v and %v, want 20ms and 1s", got.TaskCheckInterval, got.DelayedTaskCheckInterval)
	}
	if want := (ApprovalRules{Policy: ApprovalDeny, Timeout: time.Hour}); w.cfg.Approvals != want {
		t.Errorf("Approvals: %+v, want %+v", w.cfg.Approvals, want)
	}
	if want := (FastTakeover{After: 1500 * time.Millisecond, Beat: 500 * time.Millisecond}); w.cfg.Takeover != want {
		t.Errorf("Takeover: %+v, want %+v", w.cfg.Takeover, want)
	}

	w = newUnconnectedWorker(t, WorkerConfig{Ordering: Ordering{Off: true},
		Timing: WorkerTiming{DelayedTaskCheckInterval: 5 * time.Second}, Takeover: FastTakeover{After: -1}})
	if got := w.ServerConfig().DelayedTaskCheckInterval; got != 5*time.Second {
		t.Errorf("without ordering: DelayedTaskCheckInterval %v, want 5s", got)
	}
	if w.tk != nil || w.cfg.Takeover.Beat != 0 {
		t.Errorf("Takeover.After -1: registry %v, Beat %v; want no registry and no beat", w.tk != nil, w.cfg.Takeover.Beat)
	}
}
