package queue

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// AmbiguousError is Lookup's error for a prefix that more than one turn's task id or otid
// starts with. Candidates holds up to MaxLookupCandidates of them, sorted; More reports that
// more turns begin with it (they were not read).
type AmbiguousError struct {
	Prefix     string
	Candidates []string
	More       bool
}

// MaxLookupCandidates bounds AmbiguousError.Candidates.
const MaxLookupCandidates = 10

func (e *AmbiguousError) Error() string {
	n := fmt.Sprintf("%d", len(e.Candidates))
	list := strings.Join(e.Candidates, ", ")
	if e.More {
		n = "more than " + n
		list += " and more"
	}
	return fmt.Sprintf("%q is the beginning of %s turns' ids: %s; give more of the id", e.Prefix, n, list)
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
func (j *Journal) Lookup(ctx context.Context, id string) (*TurnRecord, error) {
	id = strings.TrimSuffix(strings.TrimSuffix(id, "…"), "...")
	if id == "" {
		return nil, fmt.Errorf("%w: empty id", ErrNotFound)
	}
	if rec, err := j.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	if rec, err := j.ByOtid(ctx, id); !errors.Is(err, ErrNotFound) {
		return rec, err
	}
	sctx, cancel := context.WithTimeout(ctx, j.opts.LookupTimeout)
	defer cancel()
	const limit = MaxLookupCandidates + 1
	cands, err := j.taskIDsWithPrefix(sctx, id, limit)
	byOtid := false
	if err == nil && len(cands) == 0 {
		byOtid = true
		cands, err = j.otidsWithPrefix(sctx, id, limit)
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

// taskIDsWithPrefix returns up to limit indexed task ids that begin with p or with
// "turn:"+p and whose record has not expired (the index keeps an entry until it is trimmed);
// on an error, those found so far.
func (j *Journal) taskIDsWithPrefix(ctx context.Context, p string, limit int) ([]string, error) {
	key := j.indexKey(FilterAll)
	seen := map[string]bool{}
	var out, pending []string
	// live moves pending ids whose record exists to out, no more than out has room for.
	live := func() error {
		for len(pending) > 0 && len(out) < limit {
			batch := pending[:min(len(pending), limit-len(out))]
			pending = pending[len(batch):]
			pipe := j.rdb.Pipeline()
			exists := make([]*redis.IntCmd, len(batch))
			for i, id := range batch {
				exists[i] = pipe.Exists(ctx, j.recordKey(id))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			for i, id := range batch {
				if exists[i].Val() == 1 {
					out = append(out, id)
				}
			}
		}
		return nil
	}
	for _, pre := range []string{p, "turn:" + p} {
		iter := j.rdb.ZScan(ctx, key, 0, globEscape(pre)+"*", 1000).Iterator()
		for i := 0; len(out) < limit && iter.Next(ctx); i++ {
			if i%2 == 1 {
				continue // the scores
			}
			if m := iter.Val(); !seen[m] && strings.HasPrefix(m, pre) {
				seen[m] = true
				pending = append(pending, m)
				if len(pending) >= limit-len(out) {
					if err := live(); err != nil {
						return out, fmt.Errorf("queue: journal lookup %q: %w", p, err)
					}
				}
			}
		}
		if err := iter.Err(); err != nil {
			return out, fmt.Errorf("queue: journal lookup %q: %w", p, err)
		}
		if err := live(); err != nil {
			return out, fmt.Errorf("queue: journal lookup %q: %w", p, err)
		}
	}
	return out, nil
}

// otidsWithPrefix returns up to limit otids with a journal key that begin with p; on an
// error, those found so far.
func (j *Journal) otidsWithPrefix(ctx context.Context, p string, limit int) ([]string, error) {
	base := j.otidKey("")
	match := globEscape(base+p) + "*"
	var (
		mu  sync.Mutex
		out []string
	)
	full := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(out) >= limit
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for !full() && iter.Next(ctx) {
			if k := iter.Val(); strings.HasPrefix(k, base+p) {
				mu.Lock()
				if len(out) < limit {
					out = append(out, strings.TrimPrefix(k, base))
				}
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := j.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, j.rdb)
	}
	if err != nil {
		return out, fmt.Errorf("queue: journal lookup otid %q: %w", p, err)
	}
	return out, nil
}

// globEscape escapes the characters of a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
