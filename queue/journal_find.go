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
// starts with. Candidates holds up to MaxLookupCandidates of them, sorted; More counts the
// rest.
type AmbiguousError struct {
	Prefix     string
	Candidates []string
	More       int
}

// MaxLookupCandidates bounds AmbiguousError.Candidates.
const MaxLookupCandidates = 10

func (e *AmbiguousError) Error() string {
	s := fmt.Sprintf("%q is the beginning of %d turns' ids: %s", e.Prefix, len(e.Candidates)+e.More,
		strings.Join(e.Candidates, ", "))
	if e.More > 0 {
		s += fmt.Sprintf(" and %d more", e.More)
	}
	return s + "; give more of the id"
}

// Lookup returns the record of the turn that id names: a task id, an otid, or the unique
// beginning of either (a trailing "…" or "...", as a cut table column shows, is ignored; a
// bare "turn:" is implied for task ids). A prefix that several turns share gives an
// *AmbiguousError naming them; no turn gives an error wrapping ErrNotFound. Task ids are
// looked up in the journal's index of recent turns, otids by their keys (a SCAN, only when
// no task id matches).
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
	cands, err := j.taskIDsWithPrefix(ctx, id)
	if err != nil {
		return nil, err
	}
	byOtid := false
	if len(cands) == 0 {
		byOtid = true
		if cands, err = j.otidsWithPrefix(ctx, id); err != nil {
			return nil, err
		}
	}
	var (
		recs  []*TurnRecord
		names []string
	)
	for _, c := range cands {
		get := j.Get
		if byOtid {
			get = j.ByOtid
		}
		rec, err := get(ctx, c)
		if errors.Is(err, ErrNotFound) {
			continue // expired
		}
		if err != nil {
			return nil, err
		}
		recs, names = append(recs, rec), append(names, c)
	}
	switch len(recs) {
	case 0:
		return nil, fmt.Errorf("%w: no task id or otid begins with %q", ErrNotFound, id)
	case 1:
		return recs[0], nil
	}
	sort.Strings(names)
	e := &AmbiguousError{Prefix: id, Candidates: names}
	if len(names) > MaxLookupCandidates {
		e.Candidates, e.More = names[:MaxLookupCandidates], len(names)-MaxLookupCandidates
	}
	return nil, e
}

// taskIDsWithPrefix returns the indexed task ids that begin with p or with "turn:"+p.
func (j *Journal) taskIDsWithPrefix(ctx context.Context, p string) ([]string, error) {
	key := j.indexKey(FilterAll)
	seen := map[string]bool{}
	var out []string
	for _, pre := range []string{p, "turn:" + p} {
		iter := j.rdb.ZScan(ctx, key, 0, globEscape(pre)+"*", 1000).Iterator()
		for i := 0; iter.Next(ctx); i++ {
			if i%2 == 1 {
				continue // the scores
			}
			if m := iter.Val(); !seen[m] && strings.HasPrefix(m, pre) {
				seen[m] = true
				out = append(out, m)
			}
		}
		if err := iter.Err(); err != nil {
			return nil, fmt.Errorf("queue: journal lookup %q: %w", p, err)
		}
	}
	return out, nil
}

// otidsWithPrefix returns the otids with a journal key that begin with p.
func (j *Journal) otidsWithPrefix(ctx context.Context, p string) ([]string, error) {
	base := j.otidKey("")
	match := globEscape(base+p) + "*"
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); strings.HasPrefix(k, base+p) {
				mu.Lock()
				out = append(out, strings.TrimPrefix(k, base))
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
		return nil, fmt.Errorf("queue: journal lookup otid %q: %w", p, err)
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
