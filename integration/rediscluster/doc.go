// Package rediscluster starts a real Redis Cluster for a test: six
// redis-server processes on free loopback ports (three masters, each with one
// replica), joined with redis-cli --cluster create, and stopped when the test
// ends. Beside the seeds for a go-redis ClusterClient it offers what a test of
// a sharded layout needs: each master's keys and commands (DBSIZE, INFO
// commandstats) to compute its share, a manual failover, the SIGKILL of a
// master, and a slot migration that may run while a load goes on.
//
// redis-server and redis-cli must be on PATH; without them the test is
// skipped (failed when LETTAQ_REQUIRE_REDIS=1). The package holds no test of
// a caller's code and never runs under -short: a caller skips with
// testing.Short() before Start.
package rediscluster
