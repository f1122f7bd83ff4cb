package main

import (
	"time"

	"github.com/hibiken/asynq"
)

// loop is one of an asynq.Server's background loops that talks to Redis
// while nothing is enqueued (read from Asynq v0.26.0's source: processor.go,
// forwarder.go, janitor.go, recoverer.go, heartbeat.go, subscriber.go and
// internal/rdb/rdb.go; go-redis's pubsub.go). Each run sends, per queue or once, scripts (one
// EVALSHA each, counted by INFO commandstats with the commands it runs
// inside) and plain commands.
type loop struct {
	name     string
	sends    string // what one run sends
	perQueue bool   // once per queue each run, one queue after the other
	scripts  int    // EVALSHA round trips per run (per queue when perQueue)
	plain    int    // other commands per run (each its own round trip)
	commands int    // INFO commandstats calls per run: scripts, their inner commands, plain ones
	every    func(asynq.Config) time.Duration
}

// idleLoops are the loops of an idle asynq.Server with lettaq's settings (no
// GroupAggregator: the aggregator does not run; no HealthCheckFunc: the
// healthchecker does not either; the syncer only retries failed writes).
var idleLoops = []loop{
	{name: "processor (dequeue poll)", perQueue: true, scripts: 1, commands: 3,
		sends: "dequeue script on each queue in turn (EXISTS paused, RPOPLPUSH pending→active), then sleeps TaskCheckInterval/2 + rand[0, TaskCheckInterval)",
		every: func(c asynq.Config) time.Duration { return c.TaskCheckInterval }},
	{name: "forwarder", perQueue: true, scripts: 2, commands: 4,
		sends: "forward script on the scheduled and on the retry set (ZRANGEBYSCORE … LIMIT 0 100)",
		every: func(c asynq.Config) time.Duration { return c.DelayedTaskCheckInterval }},
	{name: "janitor", perQueue: true, scripts: 1, commands: 2,
		sends: "delete-expired-completed script (ZRANGEBYSCORE on completed)",
		every: func(asynq.Config) time.Duration { return 8 * time.Second }},
	{name: "recoverer", perQueue: true, scripts: 2, commands: 5,
		sends: "list-lease-expired script (ZRANGEBYSCORE on lease) and reclaim-stale-aggregation-sets script (ZRANGEBYSCORE, ZREMRANGEBYSCORE)",
		every: func(asynq.Config) time.Duration { return time.Minute }},
	{name: "heartbeater", scripts: 1, plain: 2, commands: 6,
		sends: "ZADD asynq:servers, ZADD asynq:workers, write-server-state script (SETEX, DEL, EXPIRE); EXTEND of leases only with tasks running",
		every: func(asynq.Config) time.Duration { return 5 * time.Second }},
	{name: "subscriber", plain: 1, commands: 1,
		sends: "PING on its SUBSCRIBE connection (go-redis's PubSub channel checks an idle connection every 3s); the healthchecker's PING runs only with a HealthCheckFunc, which lettaq does not set",
		every: func(asynq.Config) time.Duration { return 3 * time.Second }},
}

// predict returns the commands and round trips a second one idle server
// sends on queues queues, by idleLoops (round-trip time taken as 0: with
// many queues the dequeue poll's cycle is longer by one round trip per
// queue, so a little fewer).
func predict(cfg asynq.Config, queues int) (commands, trips float64) {
	for _, l := range idleLoops {
		n := 1
		if l.perQueue {
			n = queues
		}
		runs := 1 / l.every(cfg).Seconds()
		commands += runs * float64(n*l.commands)
		trips += runs * float64(n*(l.scripts+l.plain))
	}
	return commands, trips
}
