package webchat

import (
	"context"
	"encoding/json"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/record"
)

// Said keeps what the user said in a chat, by message id: the reply stream
// names the message a turn answers (the accepted event's message_id) but
// does not carry its text, and the page shows the conversation from the
// stream alone.
type Said interface {
	Put(ctx context.Context, c record.Conversation, messageID string, s Said1) error
	Get(ctx context.Context, c record.Conversation, messageIDs []string) (map[string]Said1, error)
}

// Said1 is one message as the user sent it.
type Said1 struct {
	Text   string `json:"text"`
	Images int    `json:"images,omitempty"` // how many images it carried (not kept)
}

// RedisSaid keeps the messages in one hash per chat,
// <prefix>webchat:said:web:<chat id> (message id → Said1 as JSON), expiring
// TTL after its last write. Put is an HSET of the same value each time: a
// repeated send changes nothing.
type RedisSaid struct {
	Redis  redis.UniversalClient
	Prefix string        // the workers' key prefix, e.g. "lettaq:"
	TTL    time.Duration // default 7 days
}

func (s *RedisSaid) key(c record.Conversation) string {
	return s.Prefix + "webchat:said:" + c.Integration + ":" + c.ChatID
}

// Put keeps s as the message messageID of c.
func (s *RedisSaid) Put(ctx context.Context, c record.Conversation, messageID string, v Said1) error {
	b, _ := json.Marshal(v)
	ttl := s.TTL
	if ttl <= 0 {
		ttl = 7 * 24 * time.Hour
	}
	_, err := s.Redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.key(c), messageID, b)
		p.Expire(ctx, s.key(c), ttl)
		return nil
	})
	return err
}

// Get returns the messages of c among messageIDs that are kept.
func (s *RedisSaid) Get(ctx context.Context, c record.Conversation, messageIDs []string) (map[string]Said1, error) {
	out := map[string]Said1{}
	if len(messageIDs) == 0 {
		return out, nil
	}
	vals, err := s.Redis.HMGet(ctx, s.key(c), messageIDs...).Result()
	if err != nil {
		return nil, err
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		var one Said1
		if json.Unmarshal([]byte(str), &one) == nil {
			out[messageIDs[i]] = one
		}
	}
	return out, nil
}
