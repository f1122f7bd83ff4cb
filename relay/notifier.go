package relay

import (
	"context"
	"strings"
	"time"

	"github.com/lettaq/lettaq/queue"
)

// Notify marks every chat whose reply stream gets an entry, from Redis's
// keyspace notifications (XADD), until ctx ends: the workers need no change to
// tell the relay which chats have news. Every replica runs it, so a dead one
// loses no mark; a mark made twice costs one empty Drain. It turns the
// notifications on (CONFIG SET notify-keyspace-events, adding "E" and "t")
// when it may; where CONFIG is refused, enable them in redis.conf.
//
// Notifications are not stored: an event written while no replica listens is
// found by Sweep, which Run's caller runs at start.
func (r *Relay) Notify(ctx context.Context, shards int) error {
	rdb := r.cfg.Redis
	if cur, err := rdb.ConfigGet(ctx, "notify-keyspace-events").Result(); err == nil {
		v := cur["notify-keyspace-events"]
		if !(strings.Contains(v, "E") && (strings.Contains(v, "t") || strings.Contains(v, "A"))) {
			if err := rdb.ConfigSet(ctx, "notify-keyspace-events", v+"Et").Err(); err != nil {
				r.log.Warn("relay: cannot turn keyspace notifications on; set notify-keyspace-events Et", "err", err)
			}
		}
	}
	sub := rdb.PSubscribe(ctx, "__keyevent@*__:xadd")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			c, ok := r.st.ChatOfStream(m.Payload)
			if !ok || !r.relays(c) {
				continue
			}
			for {
				err := r.Mark(ctx, c, shards)
				if err == nil || ctx.Err() != nil {
					break
				}
				r.log.Warn("relay: mark failed; trying again", "chat", c.String(), "err", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
}

// Sweep marks every chat whose reply stream has entries past the relay's
// cursor (SCAN over the reply streams): what happened while no replica
// listened to the notifications.
func (r *Relay) Sweep(ctx context.Context, shards int) (marked int, err error) {
	iter := r.cfg.Redis.Scan(ctx, 0, r.st.RepliesPrefix()+"*", 1000).Iterator()
	for iter.Next(ctx) {
		c, ok := r.st.ChatOfStream(iter.Val())
		if !ok || !r.relays(c) {
			continue
		}
		last, err := r.cfg.Redis.XRevRangeN(ctx, iter.Val(), "+", "-", 1).Result()
		if err != nil || len(last) == 0 {
			continue
		}
		st, err := r.st.Load(ctx, c)
		if err != nil {
			return marked, err
		}
		if st.Cursor == "" || !entryLE(last[0].ID, st.Cursor) {
			if err := r.Mark(ctx, c, shards); err != nil {
				return marked, err
			}
			marked++
		}
	}
	return marked, iter.Err()
}

// relays reports whether c is a chat of an integration this relay has an
// adapter for: the others' streams are read by someone else (the web chat
// page's browsers read theirs themselves), and marking them would only make
// Drain fail for them every second.
func (r *Relay) relays(c queue.Conversation) bool {
	return r.cfg.Adapters[c.Integration] != nil
}
