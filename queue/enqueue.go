package queue

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/record"
)

// Enqueue: a message becomes a turn. The Client checks the deployment's shard layout once,
// joins the turn to its chat's line, enqueues its task, judges a task id already taken
// (the same message delivered again, or another message under its id), and writes the
// accepted event.

// EnqueueResult says what Enqueue did: follow the turn by its TaskID (the
// journal, Client.Cancel) or its Otid, and read Duplicate to tell a message
// delivered twice.
type EnqueueResult struct {
	// TaskID is the task of the turn (the existing one for a duplicate).
	TaskID string `json:"task_id"`
	// Duplicate is true when a task with this id already existed: the
	// message was delivered before, and no second turn was made.
	Duplicate bool `json:"duplicate"`
	// Queue the task is in.
	Queue string `json:"queue"`
	// Otid of the turn.
	Otid string `json:"otid"`
	// Position is the turn's 0-based place in its conversation's line (0:
	// it runs next), under ordering; -1 when the turn already finished.
	Position int `json:"position"`
}

// Enqueue validates m and makes it a task. A message whose MessageID was
// enqueued before (and whose task is still retained) is not enqueued
// again: the result names the existing task with Duplicate set; with
// another text (or images) it is refused with a *MessageIDConflictError.
// Validation errors are *ValidationError.
//
// Under ordering, the task first joins its conversation's line (a
// duplicate joins again: that is idempotent and keeps its place), and the
// accepted event carries its position. A turn with turns ahead of it is
// enqueued as a scheduled task (Asynq's Scheduled state: waiting, not
// failed): the turn ahead of it, when it ends, moves it to pending
// (ordering.Sequencer.Wake); its process-at time (Ordering.WaitCheck
// ahead, 10 minutes by default) is only the safety net. If the enqueue fails, a task that this
// call put in the line leaves it again (a duplicate's place is the
// original's, and stays); if the join fails, nothing is enqueued.
//
// With shards, the turn goes to its chat's shard (ClientConfig.Shards);
// the first Enqueue of a Client checks the deployment's recorded layout
// and refuses with a *shard.MismatchError when it is another.
func (c *Client) Enqueue(ctx context.Context, m Message) (EnqueueResult, error) {
	if err := c.shards.claim(ctx); err != nil {
		return EnqueueResult{}, err
	}
	stamped := m.EnqueuedAt.IsZero() // the payload is this call's alone (its time)
	if stamped {
		m.EnqueuedAt = c.cfg.Now().UTC()
	}
	b, err := EncodePayload(m)
	if err != nil {
		return EnqueueResult{}, err
	}
	sh := c.shards.layout.Of(m.Conversation.Integration, m.Conversation.ChatID)
	id := c.shards.layout.TaskID(sh, TaskIDFor(m))
	qname := c.shards.layout.Queue(sh)
	res := EnqueueResult{TaskID: id, Queue: qname, Otid: OtidFor(m, id)}
	opts := c.TaskOptions(id)
	var key string
	var joined bool // this call put the task in the line
	if c.seq != nil {
		key = c.cfg.Ordering.Key(m)
		pos, added, err := c.seq.JoinAdded(ctx, key, id)
		if err != nil {
			return EnqueueResult{}, fmt.Errorf("queue: could not join %s to its conversation's line (nothing enqueued): %w", id, err)
		}
		res.Position, joined = pos, added
		if pos > 0 {
			opts = append(opts, asynq.ProcessIn(c.cfg.Ordering.recheck()))
		}
	}
	_, err = c.ac.EnqueueContext(ctx, asynq.NewTask(TaskType, b), opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		dup, cerr := c.existingTask(m, id, b, stamped)
		if cerr != nil {
			if joined { // this call put the id back in a line the first message's task had left
				_ = c.seq.Remove(context.WithoutCancel(ctx), key, id)
			}
			return EnqueueResult{}, cerr
		}
		res.Duplicate = dup
	case err != nil:
		if joined {
			c.leaveLine(ctx, key, id)
		}
		return EnqueueResult{}, fmt.Errorf("queue: enqueue %s: %w", id, err)
	}
	if c.seq != nil && res.Position > 0 && !res.Duplicate {
		// The turns ahead may all have ended between the join and the
		// enqueue (the last one found no task to wake): then run it now.
		if pos, err := c.seq.Position(ctx, key, id); err == nil && pos == 0 {
			_ = c.insp.RunTask(qname, id)
		}
	}
	if c.cfg.Replies != nil && !res.Duplicate {
		// Best effort: the worker writes it at the first attempt otherwise.
		_, _ = c.cfg.Replies.EmitAcceptedOnce(ctx, m.Conversation, record.ReplyEvent{
			TaskID: id, Otid: res.Otid, MessageID: m.MessageID, Position: max(res.Position, 0)})
	}
	return res, nil
}

// existingTask judges the task that holds id when m's enqueue (payload b)
// found it taken. An enqueue whose reply was lost after it ran, sent again by
// go-redis, conflicts with itself: the task then holds this very call's
// payload (stamped: it carries this call's own enqueue time), and the call is
// not a duplicate. A task holding a message with another content is a
// *MessageIDConflictError; the same content is a duplicate. A task that cannot
// be read (gone meanwhile, Redis trouble, a payload of another version) is
// taken as a duplicate, as every one was before contents were compared.
func (c *Client) existingTask(m Message, id string, b []byte, stamped bool) (duplicate bool, err error) {
	info, err := c.insp.GetTaskInfo(c.shards.queueOf(id), id)
	if err != nil {
		return true, nil
	}
	if stamped && bytes.Equal(info.Payload, b) {
		return false, nil
	}
	first, err := DecodePayload(info.Payload)
	if err != nil {
		return true, nil
	}
	if a, h := contentHash(first), contentHash(m); a != h {
		return false, &MessageIDConflictError{MessageID: m.MessageID, TaskID: id, EnqueuedHash: a, NewHash: h}
	}
	return true, nil
}

// contentHash is the sha256 (hex) of what a message says: its text and its images. Two
// deliveries of one message have the same.
func contentHash(m Message) string {
	h := sha256.New()
	h.Write([]byte(m.Text))
	for _, im := range m.Images {
		h.Write([]byte{0})
		h.Write([]byte(im.URL))
		h.Write([]byte{0})
		h.Write([]byte(im.MediaType))
		h.Write([]byte{0})
		h.Write([]byte(im.Data))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// leaveLine undoes the join of an Enqueue whose enqueue failed: the task
// leaves the line only when this call put it there (a duplicate's join
// changed nothing: the place is the original task's) and the task is known
// not to exist (an enqueue whose reply was lost may have happened). When
// that is not known, the place stays: a head whose task does not exist is
// removed by the next turn's acquire once Config.DeadHeadGrace has passed.
func (c *Client) leaveLine(ctx context.Context, key, id string) {
	qname := c.shards.queueOf(id)
	if _, err := c.insp.GetTaskInfo(qname, id); !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return
	}
	_ = c.waker(c.insp).Leave(context.WithoutCancel(ctx), qname, key, id)
}
