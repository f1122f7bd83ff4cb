package queue

import (
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/ordering"
)

// letta is the worker's side of Letta: the agent client, and the
// continuation runner that runs each attempt over it. When the worker made
// the client (from Letta.URL), it closes its idle connections once it stops.
type letta struct {
	client     *agentclient.Client
	ownsClient bool
	runner     *continuation.Runner
}

// newLetta takes the given client, or makes one from mk, and the runner
// over it (cont: its Client is set here).
func newLetta(given *agentclient.Client, mk agentclient.Config, cont continuation.Config) (letta, error) {
	l := letta{client: given}
	if l.client == nil {
		c, err := agentclient.New(mk)
		if err != nil {
			return letta{}, fmt.Errorf("queue: letta client: %w", err)
		}
		l.client, l.ownsClient = c, true
	}
	cont.Client = l.client
	r, err := continuation.New(cont)
	if err != nil {
		return letta{}, fmt.Errorf("queue: %w", err)
	}
	l.runner = r
	return l, nil
}

// closeIdle closes the idle connections of a client the worker made.
func (l *letta) closeIdle() {
	if l.ownsClient {
		l.client.CloseIdleConnections()
	}
}

// redisConns are the worker's own Redis connections: the option that its
// clients and Asynq's are made from, and the go-redis client on the Asynq
// Redis for its own reads and writes, which it closes when it made it.
type redisConns struct {
	conn    asynq.RedisConnOpt    // redisopt.Lean(cfg.Redis)
	rdb     redis.UniversalClient // nil: Stores.Replies and Stores.Journal were given, without Stores.RedisClient
	ownsRdb bool
}

// dialRedis takes the given client, or makes one from conn when the worker
// needs one of its own (it makes its Replies or its Journal).
func (c *redisConns) dialRedis(given redis.UniversalClient, need bool) error {
	switch {
	case given != nil:
		c.rdb = given
	case need:
		rdb, ok := c.conn.MakeRedisClient().(redis.UniversalClient)
		if !ok {
			return errors.New("queue: WorkerConfig.Redis does not make a go-redis v9 client; set Replies and Journal")
		}
		c.rdb, c.ownsRdb = rdb, true
	}
	return nil
}

// closeRdb closes the client the worker made.
func (c *redisConns) closeRdb() {
	if c.ownsRdb {
		_ = c.rdb.Close()
	}
}

// orderer is the worker's side of ordering.
type orderer struct {
	cfg  Ordering
	seq  *ordering.Sequencer
	insp *asynq.Inspector
	rdb  redis.UniversalClient // owned when made here
}

func (o *orderer) close() {
	if o == nil {
		return
	}
	_ = o.insp.Close()
	if o.rdb != nil {
		_ = o.rdb.Close()
	}
}

// newSequencer returns o.Sequencer or one made on conn's Redis (then
// owned: the returned client must be closed).
//
// shared, when not nil, is a client on the same Redis to use instead (not
// owned): the worker's, so that a turn's acquire and its first reads share
// a round trip (see queue/internal/attempt's Pipeline.acquire).
func (o Ordering) newSequencer(conn asynq.RedisConnOpt, shared redis.UniversalClient) (*ordering.Sequencer, redis.UniversalClient, error) {
	if o.Sequencer != nil {
		return o.Sequencer, nil, nil
	}
	if shared != nil {
		s, err := ordering.New(shared, o.Config)
		if err != nil {
			return nil, nil, fmt.Errorf("queue: ordering: %w", err)
		}
		return s, nil, nil
	}
	rdb, ok := conn.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, nil, errors.New("queue: the Redis option does not make a go-redis v9 client; set Ordering.Sequencer")
	}
	s, err := ordering.New(rdb, o.Config)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("queue: ordering: %w", err)
	}
	return s, rdb, nil
}
