package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// ExitNoRedis is enqueue's exit code when Redis does not answer (no worker, or the wrong address).
const ExitNoRedis = 5

// redisLogger routes go-redis's own log lines (dial failures, pool trouble: it prints them with
// the standard log package by default, plain text in the middle of a JSON log) through slog.
// The same line repeated within repeatEvery is written once, then counted: during an outage
// go-redis repeats its dial failure many times a second.
type redisLogger struct {
	log         *slog.Logger
	level       slog.Level
	repeatEvery time.Duration

	mu   sync.Mutex
	last map[string]time.Time // format → when last written
	hush map[string]int       // format → lines left out since
}

// SetRedisLogger makes go-redis log through logger at level (it is a process-wide setting of
// go-redis: the worker and enqueue commands call it once at start).
func SetRedisLogger(logger *slog.Logger, level slog.Level) {
	redis.SetLogger(newRedisLogger(logger, level))
}

func newRedisLogger(logger *slog.Logger, level slog.Level) *redisLogger {
	return &redisLogger{log: logger.With(slog.String("component", "go-redis")), level: level,
		repeatEvery: 10 * time.Second, last: map[string]time.Time{}, hush: map[string]int{}}
}

// Printf implements go-redis's internal.Logging.
func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	if !l.log.Enabled(ctx, l.level) {
		return
	}
	now := time.Now()
	l.mu.Lock()
	if t, ok := l.last[format]; ok && now.Sub(t) < l.repeatEvery {
		l.hush[format]++
		l.mu.Unlock()
		return
	}
	l.last[format] = now
	left := l.hush[format]
	delete(l.hush, format)
	if len(l.last) > 256 { // formats are constants of go-redis: this never grows in practice
		clear(l.last)
	}
	l.mu.Unlock()
	attrs := []slog.Attr{}
	if left > 0 {
		attrs = append(attrs, slog.Int("repeated", left))
	}
	l.log.LogAttrs(ctx, l.level, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), attrs...)
}

// redisAddr names the Redis of o for messages ("127.0.0.1:6379", "cluster a,b", …).
func redisAddr(o asynq.RedisConnOpt) string {
	switch o := o.(type) {
	case asynq.RedisClientOpt:
		return o.Addr
	case asynq.RedisFailoverClientOpt:
		return fmt.Sprintf("sentinel %s (master %s)", strings.Join(o.SentinelAddrs, ","), o.MasterName)
	case asynq.RedisClusterClientOpt:
		return "cluster " + strings.Join(o.Addrs, ",")
	}
	return fmt.Sprintf("%T", o)
}

// redisRefusedCredentials returns a permanent configuration error when err is Redis refusing
// the connection's credentials (a wrong password or user, or none where one is needed), else
// nil. Waiting does not mend it: the password in REDIS_URL must change.
func redisRefusedCredentials(err error, addr string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "ERR AUTH", "ERR invalid password", "ERR Client sent AUTH", "NOPERM"} {
		if strings.HasPrefix(msg, p) {
			return &ConfigError{Errs: []error{fmt.Errorf("REDIS_URL: Redis at %s refuses its credentials (permanent: correct the user and password in REDIS_URL; waiting will not help): %s", addr, msg)}}
		}
	}
	return nil
}

// Backoff of the worker's wait for Redis at start.
const (
	redisWaitFirst = 500 * time.Millisecond
	redisWaitMax   = 30 * time.Second
	redisPingWait  = 2 * time.Second
)

// waitForRedis returns nil once rdb answers PING, or ctx's error. It waits without a bound (a
// worker started before its Redis, as in a compose file, just waits), writing one warning per
// backoff step (500 ms doubling to 30 s) that names the address and the error. A Redis that
// refuses the credentials ends the wait with a *ConfigError: that is permanent.
// firstErr, when not nil, is the error of a PING just made: it counts as the first attempt.
func waitForRedis(ctx context.Context, rdb redis.UniversalClient, addr string, logger *slog.Logger, firstErr error) error {
	delay := redisWaitFirst
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := firstErr
		if attempt > 1 || err == nil {
			pctx, cancel := context.WithTimeout(ctx, redisPingWait)
			err = rdb.Ping(pctx).Err()
			cancel()
		}
		if err == nil {
			if attempt > 1 {
				logger.Info("Redis answers", "redis", addr, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if cerr := redisRefusedCredentials(err, addr); cerr != nil {
			return cerr
		}
		logger.Warn("waiting for Redis: not taking turns until it answers", "redis", addr, "attempt", attempt,
			"retry_in", delay.String(), "error", err.Error())
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, redisWaitMax)
	}
}

// redisProbe keeps the result of the last check of Redis (a PING, or the worker's small write:
// see HTTPOptions.ProbeWrite), refreshed in the background every interval (each check bounded
// by timeout), so that /readyz answers at once during an outage. It logs when Redis stops and
// starts answering (or taking writes).
type redisProbe struct {
	rdb      redis.UniversalClient
	write    func(context.Context) error // the check, when not a PING
	interval time.Duration
	timeout  time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	err     error         // nil: answered
	checked bool          // at least one PING has ended
	next    chan struct{} // closed when the PING in progress ends
	first   chan struct{} // closed when the first PING ends
	stop    context.CancelFunc
	done    chan struct{}
}

// newRedisProbe starts a probe of rdb: a PING, or write when not nil.
func newRedisProbe(rdb redis.UniversalClient, write func(context.Context) error, interval, timeout time.Duration, logger *slog.Logger) *redisProbe {
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &redisProbe{rdb: rdb, write: write, interval: interval, timeout: timeout, log: logger, stop: cancel,
		done: make(chan struct{}), next: make(chan struct{}), first: make(chan struct{})}
	go p.loop(ctx)
	return p
}

func (p *redisProbe) loop(ctx context.Context) {
	defer close(p.done)
	for {
		pctx, cancel := context.WithTimeout(ctx, p.timeout)
		err := p.check(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		was, first := p.err, !p.checked
		p.err, p.checked = err, true
		close(p.next)
		p.next = make(chan struct{})
		if first {
			close(p.first)
		}
		p.mu.Unlock()
		switch {
		case err != nil && (was == nil || first) && redis.HasErrorPrefix(err, "OOM"):
			p.log.Error("Redis is full: it refuses writes (maxmemory reached under noeviction): not ready", "error", err.Error())
		case err != nil && (was == nil || first):
			p.log.Warn("Redis does not answer: not ready", "error", err.Error())
		case err == nil && was != nil && !first:
			p.log.Info("Redis answers again: ready")
		}
		t := time.NewTimer(p.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// check is one check of Redis: the write when there is one, else a PING. A full Redis's refusal
// says so (its own text names no cause an operator can act on).
func (p *redisProbe) check(ctx context.Context) error {
	if p.write == nil {
		return p.rdb.Ping(ctx).Err()
	}
	err := p.write(ctx)
	if redis.HasErrorPrefix(err, "OOM") {
		return fmt.Errorf("Redis is full: it refuses writes (maxmemory reached under noeviction; free memory or raise maxmemory): %w", err)
	}
	return err
}

// Err is the last check's error (nil: Redis answered). Before the first PING has ended it waits
// for it (at most the PING's timeout), so that a worker is ready as soon as it starts.
func (p *redisProbe) Err() error {
	select {
	case <-p.first:
	case <-time.After(p.timeout):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checked {
		return errNotChecked
	}
	return p.err
}

// Next returns a channel closed when the PING after this call ends (tests wait on it).
func (p *redisProbe) Next() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

var errNotChecked = fmt.Errorf("not checked yet")

// Close stops the background PINGs.
func (p *redisProbe) Close() {
	p.stop()
	<-p.done
}
