package line

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/record"
)

// Follower is a message merged into the turn ahead of it (coalescing).
type Follower struct {
	TaskID       string
	MessageID    string
	SenderID     string
	Text         string
	Conversation record.Conversation
}

// MergeText is the one user message of a turn that took followers: the
// head's text (sent by senderID) and the followers' texts in order,
// separated by a blank line, each prefixed with its sender ("sender:
// text") when the senders differ.
func MergeText(senderID, text string, fs []Follower) string {
	msgs := append([]Follower{{SenderID: senderID, Text: text}}, fs...)
	differ := false
	for _, m := range msgs[1:] {
		if m.SenderID != senderID {
			differ = true
		}
	}
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteString("\n\n")
		}
		if differ && m.SenderID != "" {
			b.WriteString(m.SenderID + ": ")
		}
		b.WriteString(m.Text)
	}
	return b.String()
}

// Followers are the messages merged into this turn (TakeFollowers).
func (p *Place) Followers() []Follower {
	if p == nil {
		return nil
	}
	return p.followers
}

// TakeFollowers sets the messages merged into this turn (a message of
// integration): those merged by an earlier attempt, or, on a first send
// (no intent journaled yet), those waiting right behind it now.
func (p *Place) TakeFollowers(ctx context.Context, integration string, firstSend bool) error {
	cfg := &p.l.cfg
	if cfg.Seq == nil || cfg.Coalesce == nil || !cfg.Coalesce(integration) {
		return nil
	}
	ids, err := cfg.Seq.MergedFollowers(ctx, p.a.Key, p.a.TaskID)
	if err != nil {
		return err
	}
	if len(ids) == 0 && firstSend {
		if ids, err = cfg.Seq.TakeFollowers(ctx, p.a.Key, p.a.TaskID, cfg.MaxCoalesce); err != nil {
			return err
		}
		p.newFollowers = ids
	}
	p.followers = p.followers[:0]
	for _, id := range ids {
		info, err := ordering.FindTask(p.l.insp, p.a.Queue, id)
		if err != nil {
			if errors.Is(err, asynq.ErrTaskNotFound) {
				p.a.Log.Warn("merged message's task is gone: its text is left out", "merged_task", id)
				continue
			}
			return fmt.Errorf("load merged task %s: %w", id, err)
		}
		f, err := cfg.Decode(info.Payload)
		if err != nil {
			p.a.Log.Warn("merged message's payload is invalid: its text is left out", "merged_task", id, "error", err.Error())
			continue
		}
		f.TaskID = id
		p.followers = append(p.followers, f)
	}
	return nil
}
