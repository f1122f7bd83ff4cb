package cancel

import (
	"context"
	"errors"
	"testing"
)

type fakeRecords map[string][]byte

func (f fakeRecords) GetCancel(_ context.Context, id string) ([]byte, bool, error) {
	if id == "broken" {
		return nil, false, errors.New("connection refused")
	}
	b, ok := f[id]
	return b, ok, nil
}

func (f fakeRecords) GetCancels(_ context.Context, ids []string) ([][]byte, error) {
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i] = f[id]
	}
	return out, nil
}

type target struct {
	notes []string
	errs  int
}

func (t *target) NoteCancel(b []byte, err error) {
	if err != nil {
		t.errs++
	}
	t.notes = append(t.notes, string(b))
}

// Heard reaches the running turn with its record (or with the read's error: the publish
// says there is one); a turn not running here is left to its start; Resync reads the records
// of every running turn; Remove takes out only the turn it is given.
func TestRunningHeardAndResync(t *testing.T) {
	recs := fakeRecords{"a": []byte(`{"by":"x"}`), "b": []byte(`{"by":"y"}`)}
	r := &Running[*target]{Records: recs, Log: discard}
	a, b, broken := &target{}, &target{}, &target{}
	r.Add("a", a)
	r.Add("b", b)
	r.Add("broken", broken)
	ctx := context.Background()
	r.Heard(ctx, "a")
	r.Heard(ctx, "not-here")
	r.Heard(ctx, "broken")
	if len(a.notes) != 1 || a.notes[0] != `{"by":"x"}` {
		t.Errorf("a heard %q", a.notes)
	}
	if broken.errs != 1 || len(broken.notes) != 1 {
		t.Errorf("a failed read: %d errors, %d notes; want the cancel noted with its error", broken.errs, len(broken.notes))
	}
	r.Resync(ctx)
	if len(a.notes) != 2 || len(b.notes) != 1 || len(broken.notes) != 1 {
		t.Errorf("resync: a %d, b %d, broken %d notes; want 2, 1, 1 (broken has no record)", len(a.notes), len(b.notes), len(broken.notes))
	}
	other := &target{}
	r.Remove("a", other) // another turn's remove: a stays
	r.Heard(ctx, "a")
	if len(a.notes) != 3 {
		t.Error("a removed by another turn's Remove")
	}
	r.Remove("a", a)
	r.Heard(ctx, "a")
	if len(a.notes) != 3 {
		t.Error("a still heard after its Remove")
	}
}
