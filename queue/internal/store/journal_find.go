package store

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// TaskIDsWithPrefix returns up to limit indexed task ids that begin with p or with
// "turn:"+p (with N shards also "turn:{<shard queue>}:"+p) and whose record has not
// expired (the index keeps an entry until it is trimmed); on an error, those found so far.
func (j *Journal) TaskIDsWithPrefix(ctx context.Context, p string, limit int) ([]string, error) {
	seen := map[string]bool{}
	var out, pending []string
	// live moves pending ids whose record exists to out, no more than out has room for.
	live := func() error {
		for len(pending) > 0 && len(out) < limit {
			batch := pending[:min(len(pending), limit-len(out))]
			pending = pending[len(batch):]
			pipe := j.RDB.Pipeline()
			exists := make([]*redis.IntCmd, len(batch))
			for i, id := range batch {
				exists[i] = pipe.Exists(ctx, j.Keys.Journal().Turn(id))
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
	type scan struct{ key, pre string }
	var scans []scan
	for i := range j.Keys.Shards() {
		key := j.Keys.Journal().IndexIn(i, "recent")
		scans = append(scans, scan{key, p}, scan{key, "turn:" + p})
		if j.Keys.Sharded() {
			scans = append(scans, scan{key, j.Keys.Layout.TaskID(i, "turn:"+p)})
		}
	}
	for _, sc := range scans {
		key, pre := sc.key, sc.pre
		iter := j.RDB.ZScan(ctx, key, 0, globEscape(pre)+"*", 1000).Iterator()
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

// OtidsWithPrefix returns up to limit otids with a journal key that begin with p; on an
// error, those found so far.
func (j *Journal) OtidsWithPrefix(ctx context.Context, p string, limit int) ([]string, error) {
	var (
		mu  sync.Mutex
		out []string
	)
	full := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(out) >= limit
	}
	// With N shards one SCAN matches every shard's otid keys: the shards'
	// prefixes differ only inside their hash tag ("lettaq:{lettaq-3-17}:").
	match := globEscape(j.Keys.Journal().Otid(p)) + "*"
	if j.Keys.Sharded() {
		sp := j.Keys.ShardPrefix(0)
		brace := strings.IndexByte(sp, '{')
		match = globEscape(sp[:brace]) + "{*}:" + globEscape("journal:otid:"+p) + "*"
	}
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for !full() && iter.Next(ctx) {
			k := iter.Val()
			base := j.Keys.Journal().OtidIn(j.Keys.ShardOfKey(k), "")
			if strings.HasPrefix(k, base+p) {
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
	if cc, ok := j.RDB.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, j.RDB)
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
