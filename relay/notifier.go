package relay

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/record"
)

// Notify marks every chat whose reply stream gets an entry, from Redis's
// keyspace notifications (XADD), until ctx ends: the workers need no change to
// tell the relay which chats have news. Every replica runs it, so a dead one
// loses no mark; a mark made twice costs one empty Drain. It turns the
// notifications on (CONFIG SET notify-keyspace-events, adding "E" and "t")
// when it may; where CONFIG is refused, enable them in redis.conf.
//
// Notifications are not stored: an event written while no replica listens is
// found by Sweep, which Run's caller runs at start, and which Notify runs
// itself each time its subscription is made again after a lost connection
// (go-redis reconnects by itself; a restarted Redis has also forgotten a
// CONFIG SET, which Notify then makes again).
func (r *Relay) Notify(ctx context.Context, shards int) error {
	rdb := r.cfg.Redis
	r.notificationsOn(ctx)
	sub := rdb.PSubscribe(ctx, "__keyevent@*__:xadd")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	if shards <= 0 {
		shards = 64
	}
	// An event written before the subscription was made sent its
	// notification to no one: a sweep made now finds it (the caller's sweep
	// at start may have run before the subscription).
	if n, err := r.Sweep(ctx, shards); err != nil && ctx.Err() == nil {
		r.log.Warn("relay: sweep after subscribing failed", "err", err)
	} else if n > 0 {
		r.log.Info("relay: sweep after subscribing marked chats", "chats", n)
	}
	ch := sub.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	for {
		var batch []record.Conversation
		seen := map[record.Conversation]bool{}
		resubscribed := false
		take := func(m any) {
			switch m := m.(type) {
			case *redis.Message:
				batch = r.notified(batch, seen, m)
			case *redis.Subscription:
				resubscribed = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			take(m)
		}
		// What else has come meanwhile is marked with it, in one round trip.
	more:
		for len(batch) < notifyBatch {
			select {
			case m, ok := <-ch:
				if !ok {
					break more
				}
				take(m)
			default:
				break more
			}
		}
		for len(batch) > 0 {
			err := r.st.MarkAll(ctx, batch, shards)
			if err == nil || ctx.Err() != nil {
				break
			}
			r.log.Warn("relay: mark failed; trying again", "chats", len(batch), "err", err)
			time.Sleep(100 * time.Millisecond)
		}
		if resubscribed {
			// The subscription was lost and made again: what was written
			// meanwhile sent no notification to this replica.
			r.notificationsOn(ctx)
			n, err := r.Sweep(ctx, shards)
			if err != nil {
				r.log.Warn("relay: sweep after the notifications came back failed", "err", err)
			} else {
				r.log.Info("relay: notifications back; sweep marked chats", "chats", n)
			}
		}
	}
}

// notificationsOn turns the XADD keyspace notifications on when they are not
// and CONFIG is allowed.
func (r *Relay) notificationsOn(ctx context.Context) {
	rdb := r.cfg.Redis
	cur, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return
	}
	v := cur["notify-keyspace-events"]
	if !(strings.Contains(v, "E") && (strings.Contains(v, "t") || strings.Contains(v, "A"))) {
		if err := rdb.ConfigSet(ctx, "notify-keyspace-events", v+"Et").Err(); err != nil {
			r.log.Warn("relay: cannot turn keyspace notifications on; set notify-keyspace-events Et", "err", err)
		}
	}
}

// notifyBatch is the most chats Notify marks in one round trip.
const notifyBatch = 512

// notified adds the chat of a notification to batch, once.
func (r *Relay) notified(batch []record.Conversation, seen map[record.Conversation]bool, m *redis.Message) []record.Conversation {
	c, ok := r.st.ChatOfStream(m.Payload)
	if !ok || seen[c] || !r.relays(c) {
		return batch
	}
	seen[c] = true
	return append(batch, c)
}

// Sweep marks every chat whose reply stream has entries past the relay's
// cursor (SCAN over the reply streams): what happened while no replica
// listened to the notifications. Each page of the SCAN costs three more round
// trips whatever its size (the streams' last entries, the cursors, the marks).
func (r *Relay) Sweep(ctx context.Context, shards int) (marked int, err error) {
	var cursor uint64
	for {
		keys, next, err := r.cfg.Redis.Scan(ctx, cursor, r.st.RepliesPattern(), 1000).Result()
		if err != nil {
			return marked, err
		}
		n, err := r.sweepPage(ctx, keys, shards)
		marked += n
		if err != nil || next == 0 {
			return marked, err
		}
		cursor = next
	}
}

// sweepPage marks the chats of keys (reply streams) whose last entry is past
// their cursor.
func (r *Relay) sweepPage(ctx context.Context, keys []string, shards int) (int, error) {
	var chats []record.Conversation
	var streams []string
	for _, k := range keys {
		if c, ok := r.st.ChatOfStream(k); ok && r.relays(c) {
			chats, streams = append(chats, c), append(streams, k)
		}
	}
	if len(chats) == 0 {
		return 0, nil
	}
	p := r.cfg.Redis.Pipeline()
	lasts := make([]*redis.XMessageSliceCmd, len(streams))
	for i, k := range streams {
		lasts[i] = p.XRevRangeN(ctx, k, "+", "-", 1)
	}
	_, _ = p.Exec(ctx) // each command's error is looked at below
	cursors, err := r.st.Cursors(ctx, chats)
	if err != nil {
		return 0, err
	}
	var news []record.Conversation
	for i, c := range chats {
		last, err := lasts[i].Result()
		if err != nil || len(last) == 0 {
			continue // not a stream, or gone since the SCAN
		}
		if cursors[i] == "" || !entryLE(last[0].ID, cursors[i]) {
			news = append(news, c)
		}
	}
	if err := r.st.MarkAll(ctx, news, shards); err != nil {
		return 0, err
	}
	return len(news), nil
}

// relays reports whether c is a chat of an integration this relay has an
// adapter for: the others' streams are read by someone else (the web chat
// page's browsers read theirs themselves), and marking them would only make
// Drain fail for them every second.
func (r *Relay) relays(c record.Conversation) bool {
	return r.cfg.Adapters[c.Integration] != nil
}
