package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RecordKey is where the layout of the deployment whose base queue is queue
// is recorded: "lettaq:layout:<queue>", a key of neither the prefix's nor
// a shard's, so that a worker started with another prefix finds it. It is
// one small string per deployment and never expires: it must outlive
// every queued turn of the layout it names.
func RecordKey(queue string) string {
	if queue == "" {
		queue = DefaultQueue
	}
	return "lettaq:layout:" + queue
}

// MismatchError is the refusal of a worker or producer whose layout is not
// the deployment's recorded one.
type MismatchError struct {
	Key      string // RecordKey
	Recorded string // the deployment's layout (Layout.Record)
	Ours     string // this process's
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("shards: this process's layout (%s) is not the deployment's (%s, recorded at %s): "+
		"starting with another LETTAQ_SHARDS, LETTAQ_QUEUES or LETTAQ_KEY_PREFIX would split its chats' turns and keys "+
		"between two layouts; keep the recorded one, or move the deployment to the new one as docs/operations.md "+
		"(Changing the shard layout) says", e.Ours, e.Recorded, e.Key)
}

// ErrNotRecorded is Claim's answer to a producer that knows no prefix when
// the deployment has recorded no layout yet: nothing to compare with.
var ErrNotRecorded = errors.New("shards: no layout recorded yet")

// Claim records l as the deployment's layout when none is (SET NX), and
// returns a *MismatchError when another one is. A producer that does not
// know the key prefix (knowsPrefix false) records nothing, since what it
// would record could be wrong: it compares the scheme, N and queue with a
// recorded layout, or gets ErrNotRecorded.
func (l Layout) Claim(ctx context.Context, rdb redis.Cmdable, knowsPrefix bool) error {
	key, ours := RecordKey(l.queue), l.Record()
	if knowsPrefix {
		set, err := rdb.SetNX(ctx, key, ours, 0).Result()
		if err != nil {
			return fmt.Errorf("shards: recording the layout at %s: %w", key, err)
		}
		if set {
			return nil
		}
	}
	rec, err := rdb.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil) && !knowsPrefix:
		return ErrNotRecorded // none yet: the first worker records it
	case err != nil:
		return fmt.Errorf("shards: reading the layout at %s: %w", key, err)
	}
	if rec == ours || (!knowsPrefix && withoutPrefix(rec) == withoutPrefix(ours)) {
		return nil
	}
	return &MismatchError{Key: key, Recorded: rec, Ours: ours}
}

// withoutPrefix is a Record up to its prefix (which is last).
func withoutPrefix(rec string) string {
	if i := strings.Index(rec, " prefix="); i >= 0 {
		return rec[:i]
	}
	return rec
}
