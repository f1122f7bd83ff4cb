package service

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// A Ticker ticks until it is stopped; Stop waits for the tick under way, and nothing ticks
// after Stop returns.
func TestTickerTicksUntilStopped(t *testing.T) {
	ticks := make(chan struct{}, 100)
	var mu sync.Mutex
	stopped := false
	tk := &Ticker{Every: time.Millisecond, Jitter: 0.5, Tick: func(ctx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			t.Error("a tick after Stop returned")
		}
		select {
		case ticks <- struct{}{}:
		default:
		}
	}}
	if err := tk.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tk.Start(context.Background()); err != nil { // a second start runs nothing more
		t.Fatal(err)
	}
	for range 3 {
		<-ticks
	}
	tk.Stop()
	mu.Lock()
	stopped = true
	mu.Unlock()
	tk.Stop() // a second stop returns at once
}

// Immediate ticks before the first wait: with an hour between ticks, the first one still
// comes at Start.
func TestTickerImmediate(t *testing.T) {
	ticked := make(chan context.Context, 1)
	tk := &Ticker{Every: time.Hour, Immediate: true, Tick: func(ctx context.Context) { ticked <- ctx }}
	_ = tk.Start(context.Background())
	ctx := <-ticked
	tk.Stop()
	if ctx.Err() == nil {
		t.Error("the tick's context still open after Stop")
	}
}

// A Ticker stopped before it started, or whose context ends, stops by itself.
func TestTickerStopWithoutStartAndContextEnd(t *testing.T) {
	(&Ticker{}).Stop()
	ctx, cancel := context.WithCancel(context.Background())
	tk := &Ticker{Every: time.Hour, Tick: func(context.Context) {}}
	_ = tk.Start(ctx)
	cancel()
	tk.Stop()
}

type recorder struct {
	name string
	log  *[]string
	err  error
}

func (r recorder) Start(context.Context) error {
	*r.log = append(*r.log, "start "+r.name)
	return r.err
}
func (r recorder) Stop() { *r.log = append(*r.log, "stop "+r.name) }

// A Group starts in order and stops in the reverse order; a start that fails stops what
// was started and says why.
func TestGroupOrder(t *testing.T) {
	var log []string
	var g Group
	g.Add(recorder{"a", &log, nil}, recorder{"b", &log, nil})
	g.Add(recorder{"c", &log, nil})
	if err := g.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Stop()
	g.Stop()
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Errorf("order %q, want %q", log, want)
	}

	log = nil
	boom := errors.New("boom")
	g = Group{}
	g.Add(recorder{"a", &log, nil}, recorder{"b", &log, boom}, recorder{"c", &log, nil})
	if err := g.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("start: %v, want boom", err)
	}
	want = []string{"start a", "start b", "stop a"}
	if !slices.Equal(log, want) {
		t.Errorf("a failed start: %q, want %q", log, want)
	}
}
