package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/lettaq/lettaq/queue/record"
)

// Notify writes n into its chat's reply stream as a notify event, once per
// key and chat (see Notice.Key): the check of the key's marker
// (<prefix>notified:<integration>:<chat_id>:<key>, kept RepliesOptions.TTL),
// the append and the marker are one script. The same key again with the
// same text is a Duplicate naming the first event; with another text, a
// *NotifyKeyConflictError. Validation errors are *ValidationError. Client
// needs ClientConfig.Replies.
func (c *Client) Notify(ctx context.Context, n Notice) (NotifyResult, error) {
	if c.cfg.Replies == nil {
		return NotifyResult{}, errors.New("queue: Notify needs ClientConfig.Replies")
	}
	return c.cfg.Replies.notify(ctx, n)
}

// notify is Client.Notify on r's streams.
func (r *Replies) notify(ctx context.Context, n Notice) (NotifyResult, error) {
	if err := n.Validate(); err != nil {
		return NotifyResult{}, err
	}
	taskID := NotifyTaskPrefix + n.Key
	if k := r.keys(); k.Sharded() { // named in its chat's shard, as a turn is
		taskID = k.Layout.TaskID(k.Layout.Of(n.Chat.Integration, n.Chat.ChatID), taskID)
	}
	ev := record.ReplyEvent{Type: record.EventNotify, TaskID: taskID, Seq: 1, Text: n.Text, Time: r.opts.Now().UTC()}
	at, data, err := encodeTimeData(&ev)
	if err != nil {
		return NotifyResult{}, err
	}
	h := sha256.Sum256([]byte(n.Text))
	sum, token := hex.EncodeToString(h[:]), uuid.NewString()
	got, err := r.st.Notify(ctx, r.Key(n.Chat), r.keys().Notified(n.Chat.Integration, n.Chat.ChatID, n.Key), sum, token,
		"type", string(record.EventNotify), "task_id", ev.TaskID, "otid", "", "run_id", "", "message_id", "",
		"seq", "1", "time", at, "data", data)
	if err != nil {
		return NotifyResult{}, fmt.Errorf("queue: notify %s in %s: %w", ev.TaskID, n.Chat, err)
	}
	res := NotifyResult{TaskID: ev.TaskID, ID: got.ID, Key: n.Key, Duplicate: got.Token != token}
	if res.Duplicate && got.Sum != sum {
		return NotifyResult{}, &NotifyKeyConflictError{Chat: n.Chat, Key: n.Key, ID: got.ID}
	}
	return res, nil
}
