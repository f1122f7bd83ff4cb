// Package rediscluster starts a real Redis Cluster for a test: six
// redis-server processes on free loopback ports (three masters, each with one
// replica), joined with redis-cli --cluster create, and killed when the test
// ends. Beside the seeds for a go-redis ClusterClient it offers what a test of
// a sharded layout needs:
//
//   - Stats and ResetStats: each master's keys (DBSIZE) and commands (INFO
//     commandstats), and KeyShares/CommandShares of them;
//   - Failover (CLUSTER FAILOVER on a master's replica) and KillMaster
//     (SIGKILL, then the cluster's own failover), each waiting until the
//     replica serves the slots and the given clients route there;
//   - MigrateSlot, or StartMigration/Move/Finish to hold a slot half moved;
//   - Slot, TagForSlot and NameInSlot to put keys or Asynq queues in chosen
//     slots, and CountRedirects to see the MOVED, ASK, TRYAGAIN and
//     CLUSTERDOWN replies go-redis handles out of the caller's sight.
//
// redis-server and redis-cli must be on PATH; without them the test is
// skipped (failed when LETTAQ_REQUIRE_REDIS=1). Starting a cluster takes a
// few seconds: a caller skips under testing.Short() before Start.
package rediscluster
