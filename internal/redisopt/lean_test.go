package redisopt

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
)

// TestLeanRedisOptions: the clients Lean makes have RedisBufferSize
// buffers, but a pipeline pool of RedisPipelinePoolSize connections with
// RedisPipelineWriteBufferSize write buffers, and keep the option's other
// settings.
func TestLeanRedisOptions(t *testing.T) {
	const n, pw, pp = RedisBufferSize, RedisPipelineWriteBufferSize, RedisPipelinePoolSize
	plain := asynq.RedisClientOpt{Addr: "127.0.0.1:1", DB: 3, Password: "pw", PoolSize: 7, DialTimeout: time.Second}
	failover := asynq.RedisFailoverClientOpt{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, DB: 2, PoolSize: 5}
	cluster := asynq.RedisClusterClientOpt{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, MaxRedirects: 4, Username: "u"}
	for _, o := range []asynq.RedisConnOpt{plain, &plain, failover, &failover} {
		c, ok := Lean(o).MakeRedisClient().(*redis.Client)
		if !ok {
			t.Fatalf("%T: not a *redis.Client", o)
		}
		got := c.Options()
		_ = c.Close()
		if got.ReadBufferSize != n || got.WriteBufferSize != n || got.PipelineReadBufferSize != n || got.PipelineWriteBufferSize != pw || got.PipelinePoolSize != pp {
			t.Errorf("%T: buffers %d/%d, pipeline %d/%d, %d pipeline connections; want %d/%d, %d/%d, %d", o, got.ReadBufferSize, got.WriteBufferSize,
				got.PipelineReadBufferSize, got.PipelineWriteBufferSize, got.PipelinePoolSize, n, n, n, pw, pp)
		}
		switch o.(type) {
		case asynq.RedisClientOpt, *asynq.RedisClientOpt:
			if got.Addr != plain.Addr || got.DB != plain.DB || got.Password != plain.Password || got.PoolSize != plain.PoolSize || got.DialTimeout != plain.DialTimeout {
				t.Errorf("%T: options not carried over: %+v", o, got)
			}
		default:
			if got.DB != failover.DB || got.PoolSize != failover.PoolSize {
				t.Errorf("%T: options not carried over: DB %d, pool %d", o, got.DB, got.PoolSize)
			}
		}
	}
	for _, o := range []asynq.RedisConnOpt{cluster, &cluster} {
		c, ok := Lean(o).MakeRedisClient().(*redis.ClusterClient)
		if !ok {
			t.Fatalf("%T: not a *redis.ClusterClient", o)
		}
		got := c.Options()
		_ = c.Close()
		if got.ReadBufferSize != n || got.WriteBufferSize != n || got.PipelineReadBufferSize != n || got.PipelineWriteBufferSize != pw || got.PipelinePoolSize != pp {
			t.Errorf("%T: buffers %d/%d, pipeline %d/%d, %d pipeline connections; want %d/%d, %d/%d, %d", o, got.ReadBufferSize, got.WriteBufferSize,
				got.PipelineReadBufferSize, got.PipelineWriteBufferSize, got.PipelinePoolSize, n, n, n, pw, pp)
		}
		if len(got.Addrs) != 2 || got.MaxRedirects != 4 || got.Username != "u" {
			t.Errorf("%T: options not carried over: %+v", o, got)
		}
	}
	// Any other option is its own business.
	other := otherConnOpt{}
	if Lean(other) != asynq.RedisConnOpt(other) {
		t.Error("an option of another type was wrapped")
	}
}

type otherConnOpt struct{}

func (otherConnOpt) MakeRedisClient() any { return nil }

// leanClient is a lean client of the test's Redis (closed when the test
// ends), a context that ends after 30 s, and a key prefix of the test's own.
func leanClient(t *testing.T) (*redis.Client, context.Context, string) {
	srv := testredis.New(t)
	c := Lean(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}).MakeRedisClient().(*redis.Client)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c, ctx, "lettaq-test-lean-" + uuid.NewString() + ":"
}

// TestLeanRedisLargeTraffic: a pipeline, a command and replies many times
// the buffers' size go through a lean client whole.
func TestLeanRedisLargeTraffic(t *testing.T) {
	c, ctx, prefix := leanClient(t)
	big := strings.Repeat("0123456789abcdef", 40*RedisBufferSize/16) // 40 buffers
	const many = 500
	keys := make([]string, 0, many+1)
	pipe := c.Pipeline()
	for i := range many {
		k := prefix + strconv.Itoa(i)
		keys = append(keys, k)
		pipe.Set(ctx, k, big[:RedisBufferSize/2+i], time.Minute)
	}
	keys = append(keys, prefix+"big")
	pipe.Set(ctx, prefix+"big", big, time.Minute)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline of %d writes: %v", many+1, err)
	}
	defer c.Del(context.Background(), keys...)
	pipe = c.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline of %d reads: %v", len(keys), err)
	}
	for i, g := range gets[:many] {
		if v := g.Val(); v != big[:RedisBufferSize/2+i] {
			t.Fatalf("value %d: %d bytes, want %d", i, len(v), RedisBufferSize/2+i)
		}
	}
	if v := gets[many].Val(); v != big {
		t.Fatalf("big value: %d bytes back, want %d", len(v), len(big))
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil || len(vals) != len(keys) || vals[many] != big {
		t.Fatalf("MGET of %d keys: %d values, err %v", len(keys), len(vals), err)
	}
}

// TestLeanRedisConcurrentPipelines: more pipelines at once than the
// pipeline pool has connections all complete, every write whole (go-redis
// gives the rest connections of the main pool, with 4 KiB buffers).
func TestLeanRedisConcurrentPipelines(t *testing.T) {
	c, ctx, prefix := leanClient(t)
	defer func() {
		for _, k := range c.Keys(context.Background(), prefix+"*").Val() {
			c.Del(context.Background(), k)
		}
	}()
	const n = 4 * RedisPipelinePoolSize
	hold := make(chan struct{})
	errs := make(chan error, n)
	for g := range n {
		go func() {
			<-hold
			pipe := c.Pipeline()
			for i := range 50 {
				pipe.Set(ctx, prefix+strconv.Itoa(g)+":"+strconv.Itoa(i), strings.Repeat("x", 1000), time.Minute)
			}
			_, err := pipe.Exec(ctx)
			errs <- err
		}()
	}
	close(hold)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := len(c.Keys(ctx, prefix+"*").Val()); got != n*50 {
		t.Fatalf("%d keys written, want %d", got, n*50)
	}
}
