package attempt

import (
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/redis/go-redis/v9"
)

// Stores are the stores and clients under the reply streams and the
// journal, for the reads and writes an attempt sends itself or queues at
// the writer.
type Stores struct {
	Replies    *store.Replies
	Journal    *store.Journal
	JournalRDB redis.UniversalClient
	Saver      *journal.Saver // makes the journal's save ops
}

// Trips are the facts of the worker's Redis clients that decide which of an
// attempt's writes share a round trip.
type Trips struct {
	// OneRedis: the journal and the reply streams are on one client, so
	// their writes share the writer's round trips.
	OneRedis bool
	// ResultWithSave: the task's result (Asynq's task hash) is on the
	// reply streams' client, so it is written with the journal's save.
	ResultWithSave bool
	// StartWithLock: the line's acquire and the start's reads share a
	// round trip (the writer's).
	StartWithLock bool
}
