package cancel

import (
	"context"
	"log/slog"
	"sync"
)

// Records reads the cancel records (queue/internal/store's Replies).
type Records interface {
	// GetCancel reads the cancel record of taskID: found says whether there is one.
	GetCancel(ctx context.Context, taskID string) (b []byte, found bool, err error)
	// GetCancels reads the records of taskIDs in one round trip (nil: none).
	GetCancels(ctx context.Context, taskIDs []string) ([][]byte, error)
}

// Target is a running turn as the cancel channel reaches it.
type Target interface {
	comparable
	// NoteCancel notes the turn's cancel record b; readErr says it could not be read (the
	// channel said there is one all the same).
	NoteCancel(b []byte, readErr error)
}

// Running is the turns a worker runs, by task id, for the cancel channel: Heard and Resync
// are the cancel subscriber's (queue/internal/cancelsub) callbacks. Set Records and Log
// before the subscriber starts.
type Running[T Target] struct {
	Records Records
	Log     *slog.Logger

	mu sync.Mutex
	m  map[string]T
}

// Add registers t as the turn running taskID.
func (r *Running[T]) Add(taskID string, t T) {
	r.mu.Lock()
	if r.m == nil {
		r.m = make(map[string]T)
	}
	r.m[taskID] = t
	r.mu.Unlock()
}

// Remove unregisters t, unless another turn took taskID since.
func (r *Running[T]) Remove(taskID string, t T) {
	r.mu.Lock()
	if r.m[taskID] == t {
		delete(r.m, taskID)
	}
	r.mu.Unlock()
}

func (r *Running[T]) get(taskID string) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[taskID]
	return t, ok
}

func (r *Running[T]) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m))
	for id := range r.m {
		out = append(out, id)
	}
	return out
}

// Heard notes the cancel the channel published for taskID on its turn, when it runs here
// (else its start reads the record).
func (r *Running[T]) Heard(ctx context.Context, taskID string) {
	t, ok := r.get(taskID)
	if !ok {
		return
	}
	b, found, err := r.Records.GetCancel(ctx, taskID)
	if err != nil {
		t.NoteCancel(nil, err)
		return
	}
	if found {
		t.NoteCancel(b, nil)
	}
}

// Resync reads the cancel records of the turns running here, for the cancels published
// while the subscriber was not subscribed.
func (r *Running[T]) Resync(ctx context.Context) {
	ids := r.ids()
	if len(ids) == 0 {
		return
	}
	recs, err := r.Records.GetCancels(ctx, ids)
	if err != nil {
		r.Log.Warn("could not read the cancel records of the running turns", "error", err.Error())
		return
	}
	for i, b := range recs {
		if b == nil {
			continue
		}
		if t, ok := r.get(ids[i]); ok {
			t.NoteCancel(b, nil)
		}
	}
}
