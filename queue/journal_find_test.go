package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lookup takes what an operator copies from a table: a whole id, a cut one, the beginning
// of a task id or otid; several matches name the candidates, none is ErrNotFound.
func TestJournalLookupPrefix(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		t0 := time.Now()
		for i, id := range []string{"turn:aaaa-1", "turn:aaab-2", "turn:b*[x]", "turn:bq"} {
			if err := j.Save(ctx, rjRecord(id, t0.Add(time.Duration(i)*time.Second))); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct{ in, want string }{
			{"turn:aaaa-1", "turn:aaaa-1"},
			{"turn:aaaa", "turn:aaaa-1"},
			{"aaab", "turn:aaab-2"},             // "turn:" implied
			{"turn:aaab-…", "turn:aaab-2"},      // cut by a table
			{"turn:aaab...", "turn:aaab-2"},     // cut, ASCII
			{"otid-turn:aaaa-1", "turn:aaaa-1"}, // a whole otid
			{"otid-turn:aaab", "turn:aaab-2"},   // an otid's beginning
			{"turn:b*", "turn:b*[x]"},           // glob characters are literal
			{"b*[", "turn:b*[x]"},
		} {
			rec, err := j.Lookup(ctx, c.in)
			if err != nil {
				t.Errorf("Lookup(%q): %v", c.in, err)
				continue
			}
			if rec.TaskID != c.want {
				t.Errorf("Lookup(%q) = %s, want %s", c.in, rec.TaskID, c.want)
			}
		}
		_, err := j.Lookup(ctx, "turn:aaa")
		var amb *AmbiguousError
		if !errors.As(err, &amb) || !slices.Equal(amb.Candidates, []string{"turn:aaaa-1", "turn:aaab-2"}) {
			t.Errorf("Lookup(turn:aaa) = %v, want an AmbiguousError naming both turns", err)
		}
		_, err = j.Lookup(ctx, "otid-turn:")
		if !errors.As(err, &amb) || len(amb.Candidates) != 4 {
			t.Errorf("Lookup(otid-turn:) = %v, want an AmbiguousError naming 4 otids", err)
		}
		for _, in := range []string{"zzz", "", "…", "turn:c"} {
			if _, err := j.Lookup(ctx, in); !errors.Is(err, ErrNotFound) {
				t.Errorf("Lookup(%q) = %v, want ErrNotFound", in, err)
			}
		}
	})
}

// lookupReads counts the commands that read a journal record or an otid's task id (GET,
// MGET, EXISTS on journal:turn: or journal:otid: keys) and the keys they name.
type lookupReads struct {
	mu   sync.Mutex
	keys int
	scan func(ctx context.Context) // run before each SCAN, when set
}

func (h *lookupReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lookupReads) count(cmd redis.Cmder) {
	switch strings.ToLower(cmd.Name()) {
	case "get", "mget", "exists":
		for _, a := range cmd.Args()[1:] {
			if s, ok := a.(string); ok && (strings.Contains(s, "journal:turn:") || strings.Contains(s, "journal:otid:")) {
				h.mu.Lock()
				h.keys++
				h.mu.Unlock()
			}
		}
	}
}

func (h *lookupReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		if strings.EqualFold(cmd.Name(), "scan") && h.scan != nil {
			h.scan(ctx)
		}
		return next(ctx, cmd)
	}
}

func (h *lookupReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h *lookupReads) reset() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.keys
	h.keys = 0
	return n
}

// TestJournalLookupReadsWhatItShows: a prefix that 300 turns share (by task id, and by otid)
// reads at most the records or keys it shows, plus one to know there are more, and says
// there are more; a unique prefix reads its one record.
func TestJournalLookupReadsWhatItShows(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		t0 := time.Now()
		for i := range 300 {
			if err := j.Save(ctx, rjRecord(fmt.Sprintf("turn:t-%04d", i), t0.Add(time.Duration(i)*time.Millisecond))); err != nil {
				t.Fatal(err)
			}
		}
		h := &lookupReads{}
		b.rdb.AddHook(h)
		for _, prefix := range []string{"t", "turn:t-0", "otid-turn:t"} {
			h.reset()
			_, err := j.Lookup(ctx, prefix)
			reads := h.reset()
			var amb *AmbiguousError
			if !errors.As(err, &amb) || len(amb.Candidates) != MaxLookupCandidates || !amb.More || !strings.Contains(err.Error(), "more") {
				t.Errorf("Lookup(%q) = %v, want %d candidates and more", prefix, err, MaxLookupCandidates)
			}
			if reads > 2+MaxLookupCandidates+1 { // the whole-id reads (task id, otid), then the candidates
				t.Errorf("Lookup(%q) read %d records or otid keys, want at most %d", prefix, reads, 2+MaxLookupCandidates+1)
			}
		}
		h.reset()
		rec, err := j.Lookup(ctx, "turn:t-0123")
		if reads := h.reset(); err != nil || rec.TaskID != "turn:t-0123" || reads > 2+2 {
			t.Errorf("Lookup(turn:t-0123) = %v, %v after %d reads", rec, err, reads)
		}
	})
}

// TestJournalLookupBoundedInTime: an otid-style prefix that no task id begins with searches
// the keyspace; on a keyspace that takes forever to scan (each SCAN waits for its context)
// the lookup gives up after JournalOptions.LookupTimeout, saying so.
func TestJournalLookupBoundedInTime(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // the test's own bound
		defer cancel()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, LookupTimeout: 300 * time.Millisecond})
		if err := j.Save(ctx, rjRecord("turn:x-1", time.Now())); err != nil {
			t.Fatal(err)
		}
		var endless atomic.Bool // off again for the cleanup's own SCAN
		endless.Store(true)
		b.rdb.AddHook(&lookupReads{scan: func(ctx context.Context) {
			if endless.Load() {
				<-ctx.Done()
			}
		}})
		t0 := time.Now()
		_, err := j.Lookup(ctx, "4c6e3f2a")
		took := time.Since(t0)
		endless.Store(false)
		if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "cut short") || took > 5*time.Second {
			t.Errorf("Lookup on an endless keyspace: %v after %v, want an error saying the search was cut short after 300ms", err, took)
		}
	})
}
