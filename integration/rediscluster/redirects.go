package rediscluster

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Redirects counts the cluster errors a ClusterClient's node connections
// receive: go-redis handles MOVED and ASK (and retries TRYAGAIN and
// CLUSTERDOWN a few times) inside one call, so the caller never sees them;
// a test reads them here to tell that they happened.
type Redirects struct {
	moved, ask, tryAgain, clusterDown atomic.Int64
}

// RedirectCounts is a snapshot of Redirects.
type RedirectCounts struct {
	Moved, Ask, TryAgain, ClusterDown int64
}

// CountRedirects hooks every node connection rc opens from now on: call it
// before rc's first command.
func CountRedirects(rc *redis.ClusterClient) *Redirects {
	r := &Redirects{}
	rc.OnNewNode(func(c *redis.Client) { c.AddHook(r) })
	return r
}

// Counts returns the counts so far.
func (r *Redirects) Counts() RedirectCounts {
	return RedirectCounts{Moved: r.moved.Load(), Ask: r.ask.Load(), TryAgain: r.tryAgain.Load(),
		ClusterDown: r.clusterDown.Load()}
}

func (r *Redirects) note(err error) {
	if err == nil {
		return
	}
	switch s := err.Error(); {
	case strings.HasPrefix(s, "MOVED "):
		r.moved.Add(1)
	case strings.HasPrefix(s, "ASK "):
		r.ask.Add(1)
	case strings.HasPrefix(s, "TRYAGAIN"):
		r.tryAgain.Add(1)
	case strings.HasPrefix(s, "CLUSTERDOWN"):
		r.clusterDown.Add(1)
	}
}

// DialHook is redis.Hook's.
func (r *Redirects) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is redis.Hook's.
func (r *Redirects) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.note(err)
		return err
	}
}

// ProcessPipelineHook is redis.Hook's.
func (r *Redirects) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.note(c.Err())
		}
		return err
	}
}
