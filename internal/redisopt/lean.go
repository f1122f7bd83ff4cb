// Package redisopt makes the Redis connection options lettaq's clients (the
// worker's, the client's, Asynq's) are made from: lean buffers, and cluster
// clients that find a promoted replica in seconds and ride out a slot
// migration or a master's failover (Lean).
package redisopt

import (
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// RedisBufferSize is the size of each read and each write buffer of a
// connection of the Redis clients lettaq makes (see Lean), but the
// write buffers of their pipeline pools.
const RedisBufferSize = 4 << 10

// RedisPipelineWriteBufferSize is the write buffer of a connection of a
// lean client's pipeline pool, which holds RedisPipelinePoolSize of them
// (a pipeline that finds them all busy takes a connection of the main
// pool, with RedisBufferSize buffers). The worker's writer sends one
// pipeline at a time, tens of KiB under load (the journal records, events,
// starts and ends of many turns): with a 4 KiB buffer go-redis wrote it in
// as many writes, each of which wakes Redis to read a part; an instant turn
// cost the bench's process 6.4 write system calls, 5.0 with this.
const RedisPipelineWriteBufferSize = 64 << 10

// RedisPipelinePoolSize is the number of connections of a lean client's
// pipeline pool (see RedisPipelineWriteBufferSize).
const RedisPipelinePoolSize = 2

// ClusterStateReload is how old a cluster client's slot map may get before
// its next command reads it again (go-redis's ClusterStateReloadInterval,
// 60s by default). A master that dies sends no MOVED: until the map is read
// again, its slots' commands go to the dead address even after its replica
// has been promoted, so with go-redis's default a worker fails a minute of
// writes after a failover that Redis finished in seconds. The read is one
// CLUSTER SLOTS per client at most this often, and only while the client is
// used.
const ClusterStateReload = 2 * time.Second

// Lean returns opt with clients whose connections have RedisBufferSize
// read and write buffers, net/http's size, instead of go-redis's (32 KiB
// each, and 128 KiB each on the connections of its pipeline pool), but the
// RedisPipelinePoolSize connections of the pipeline pool, whose write
// buffers are RedisPipelineWriteBufferSize (go-redis: 10 such). A worker
// makes four clients (its own, the sequencer's, and Asynq's server and
// inspector), each with a main and a pipeline pool that fill while many
// turns start at once, and it keeps their connections: in the bench with
// 3,000 thinking turns in flight (worker and enqueuer in one process) their
// buffers held 9.1 MB with go-redis's sizes, ~1 MB with these. Nothing gets
// too big for the smaller buffers: go-redis writes a command or a pipeline
// larger than its buffer in several writes, and reads a reply larger than
// it in several reads (a bulk string straight into its own slice). The
// worker and the client use it on the options they are given; an option of
// a type other than Asynq's three is returned as it is. A cluster client
// also reads the slot map again every ClusterStateReload, and sends again,
// for up to RefusedRetryFor, what the cluster refused without running it
// while a slot migrates (TRYAGAIN) or a dead master is replaced
// (CLUSTERDOWN, a refused connection): refused.go.
func Lean(opt asynq.RedisConnOpt) asynq.RedisConnOpt {
	switch opt.(type) {
	case asynq.RedisClientOpt, *asynq.RedisClientOpt, asynq.RedisFailoverClientOpt, *asynq.RedisFailoverClientOpt,
		asynq.RedisClusterClientOpt, *asynq.RedisClusterClientOpt:
		return leanConnOpt{opt}
	}
	return opt
}

// leanConnOpt makes the client Asynq's option makes (the fields Asynq v0.26
// copies), with RedisBufferSize buffers.
type leanConnOpt struct{ opt asynq.RedisConnOpt }

func (o leanConnOpt) MakeRedisClient() any {
	const n, pw, pp = RedisBufferSize, RedisPipelineWriteBufferSize, RedisPipelinePoolSize
	switch opt := o.opt.(type) {
	case *asynq.RedisClientOpt:
		return leanConnOpt{*opt}.MakeRedisClient()
	case *asynq.RedisFailoverClientOpt:
		return leanConnOpt{*opt}.MakeRedisClient()
	case *asynq.RedisClusterClientOpt:
		return leanConnOpt{*opt}.MakeRedisClient()
	case asynq.RedisClientOpt:
		return redis.NewClient(&redis.Options{Network: opt.Network, Addr: opt.Addr, Username: opt.Username,
			Password: opt.Password, DB: opt.DB, DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout,
			WriteTimeout: opt.WriteTimeout, PoolSize: opt.PoolSize, TLSConfig: opt.TLSConfig,
			ReadBufferSize: n, WriteBufferSize: n, PipelineReadBufferSize: n, PipelineWriteBufferSize: pw, PipelinePoolSize: pp})
	case asynq.RedisFailoverClientOpt:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: opt.MasterName,
			SentinelAddrs: opt.SentinelAddrs, SentinelUsername: opt.SentinelUsername, SentinelPassword: opt.SentinelPassword,
			Username: opt.Username, Password: opt.Password, DB: opt.DB, DialTimeout: opt.DialTimeout,
			ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout, PoolSize: opt.PoolSize, TLSConfig: opt.TLSConfig,
			ReadBufferSize: n, WriteBufferSize: n, PipelineReadBufferSize: n, PipelineWriteBufferSize: pw, PipelinePoolSize: pp})
	case asynq.RedisClusterClientOpt:
		rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: opt.Addrs, MaxRedirects: opt.MaxRedirects,
			Username: opt.Username, Password: opt.Password, DialTimeout: opt.DialTimeout, ReadTimeout: opt.ReadTimeout,
			WriteTimeout: opt.WriteTimeout, TLSConfig: opt.TLSConfig, ClusterStateReloadInterval: ClusterStateReload,
			ReadBufferSize: n, WriteBufferSize: n, PipelineReadBufferSize: n, PipelineWriteBufferSize: pw, PipelinePoolSize: pp})
		rc.OnNewNode(func(n *redis.Client) { n.AddHook(nodeAttempts{}) })
		rc.AddHook(resendRefused{})
		return rc
	}
	return o.opt.MakeRedisClient()
}
