package queue

import (
	"context"
	"errors"
	"fmt"
	"github.com/lettaq/lettaq/queue/record"
	"sort"
	"strings"
)

// ByIDOrOtid returns the record of the turn whose task id or otid is id,
// exactly (Lookup also takes the beginning of one); an error wrapping
// ErrNotFound when none.
func (j *Journal) ByIDOrOtid(ctx context.Context, id string) (*record.TurnRecord, error) {
	if rec, err := j.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	return j.ByOtid(ctx, id)
}

// Lookup returns the record of the turn that id names: a task id, an otid, or the unique
// beginning of either (a trailing "…" or "...", as a cut table column shows, is ignored; a
// bare "turn:" is implied for task ids). A prefix that several turns share gives an
// *AmbiguousError naming them; no turn gives an error wrapping ErrNotFound. Task ids are
// looked up in the journal's index of recent turns, otids by their keys (a SCAN, only when
// no task id matches).
//
// A prefix costs at most what it shows: the search stops at MaxLookupCandidates+1 live
// turns (the one more says there are more), reads no record but the one it returns, and
// gives up after JournalOptions.LookupTimeout (an error saying the search was cut short).
func (j *Journal) Lookup(ctx context.Context, id string) (*record.TurnRecord, error) {
	id = strings.TrimSuffix(strings.TrimSuffix(id, "…"), "...")
	if id == "" {
		return nil, fmt.Errorf("%w: empty id", ErrNotFound)
	}
	if rec, err := j.ByIDOrOtid(ctx, id); !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	sctx, cancel := context.WithTimeout(ctx, j.opts.LookupTimeout)
	defer cancel()
	const limit = MaxLookupCandidates + 1
	cands, err := j.st.TaskIDsWithPrefix(sctx, id, limit)
	byOtid := false
	if err == nil && len(cands) == 0 {
		byOtid = true
		cands, err = j.st.OtidsWithPrefix(sctx, id, limit)
	}
	if err != nil {
		if ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("queue: journal lookup %q: the search was cut short after %v (%d turns found so far): give more of the id, or the whole task id or otid",
				id, j.opts.LookupTimeout, len(cands))
		}
		return nil, err
	}
	switch len(cands) {
	case 0:
		return nil, fmt.Errorf("%w: no task id or otid begins with %q", ErrNotFound, id)
	case 1:
		rec, err := j.Get(ctx, cands[0])
		if byOtid {
			rec, err = j.ByOtid(ctx, cands[0])
		}
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: no task id or otid begins with %q (%s expired)", ErrNotFound, id, cands[0])
		}
		return rec, err
	}
	e := &AmbiguousError{Prefix: id, Candidates: cands}
	if len(cands) > MaxLookupCandidates {
		e.Candidates, e.More = cands[:MaxLookupCandidates], true
	}
	sort.Strings(e.Candidates)
	return nil, e
}
