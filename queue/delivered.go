package queue

import (
	"context"
	"fmt"
	"github.com/lettaq/lettaq/queue/record"
)

// FinalEvent returns the final event written for taskID's turn in c's
// stream (the one the answered marker points at). found is false when no
// final event was written, or when the stream no longer holds it (trimmed
// by MaxLen or expired).
func (r *Replies) FinalEvent(ctx context.Context, c record.Conversation, taskID string) (ev record.ReplyEvent, found bool, err error) {
	if err := c.Validate(); err != nil {
		return ev, false, err
	}
	m, found, err := r.st.FinalEntry(ctx, r.Key(c), taskID)
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("queue: final event of %s: %w", taskID, err)
		}
		return ev, false, err
	}
	return replyEventFromEntry(m), true, nil
}
