package queue

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
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
