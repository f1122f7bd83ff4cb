package takeover

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/fence"
)

type finished struct{ results []string }

func (f *finished) AttemptFinished(_, result string, _ time.Duration) {
	f.results = append(f.results, result)
}

// With takeover off (a nil Registry) an attempt registers nothing, is never taken over nor
// continued elsewhere, and its end has nothing to take out; an attempt that ends taken over
// says so to its observer all the same.
func TestOffRegistersNothing(t *testing.T) {
	var tk *Registry
	obs := &finished{}
	rn := &fence.Runner{ID: "turn-1", Retried: 1, From: "D/1"}
	r := tk.Attempt(Attempt{TaskID: "turn-1", Queue: "q", Runner: rn, Obs: obs, Start: time.Now(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Ctx: context.Background()})
	if op := r.Register(claim.Entry{}, 1); op != nil {
		t.Error("an attempt registered with takeover off")
	}
	if r.TakenOver(context.Background()) || r.FencedNow() || r.ContinuedElsewhere(context.Background()) {
		t.Error("an attempt was taken over with takeover off")
	}
	if ops := r.UnregisterOps(); len(ops) != 0 {
		t.Errorf("%d ops to take out an attempt that was never registered", len(ops))
	}
	r.Unregister()
	if err := r.EndTakenOver(); err != nil || len(obs.results) != 1 || obs.results[0] != "taken_over" {
		t.Errorf("EndTakenOver: %v, observer told %v; want nil, [taken_over]", err, obs.results)
	}
}

// A nil Registry's Alive is ordering's own test of a dead head.
func TestOffAliveIsOrderings(t *testing.T) {
	var tk *Registry
	boom := errors.New("boom")
	alive := tk.Alive(func(_ context.Context, id string) (bool, error) { return id == "a", boom })
	if ok, err := alive(context.Background(), "a"); !ok || err != boom {
		t.Errorf("alive(a) = %v, %v; want ordering's answer", ok, err)
	}
}
