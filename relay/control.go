package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// ErrNotCommand is returned by Command for a text that is no relay command:
// the adapter enqueues it as a message.
var ErrNotCommand = errors.New("relay: not a command")

// Command runs a chat command: "/stop" cancels the chat's running turn (every
// turn the relay shows as open in the chat, by task id; or, with
// Config.AgentID, the head of the chat's line) through Controller.Cancel.
// sender goes to the journal.
func (r *Relay) Command(ctx context.Context, c record.Conversation, text, sender string) (queue.CancelResult, error) {
	cmd := strings.Fields(text)
	if len(cmd) == 0 || strings.SplitN(cmd[0], "@", 2)[0] != "/stop" {
		return queue.CancelResult{}, ErrNotCommand
	}
	if r.cfg.Control == nil {
		return queue.CancelResult{}, errors.New("relay: no controller for /stop")
	}
	st, err := r.st.Load(ctx, c)
	if err != nil {
		return queue.CancelResult{}, err
	}
	for task := range st.Open {
		if strings.HasPrefix(task, queue.NotifyTaskPrefix) {
			delete(st.Open, task) // a notify being shown: no turn to stop
		}
	}
	var last queue.CancelResult
	for task := range st.Open {
		res, err := r.cfg.Control.Cancel(ctx, queue.CancelRequest{TaskID: task, By: sender, Reason: "/stop"})
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			return res, err
		}
		if err == nil {
			last = res
		}
	}
	if len(st.Open) == 0 || r.cfg.AgentID != "" {
		if r.cfg.AgentID == "" {
			return last, fmt.Errorf("relay: nothing running in %s: %w", c, queue.ErrNotFound)
		}
		res, err := r.cfg.Control.Cancel(ctx, queue.CancelRequest{Chat: &c, AgentID: r.cfg.AgentID, By: sender, Reason: "/stop"})
		if err != nil && (len(st.Open) == 0 || !errors.Is(err, queue.ErrNotFound)) {
			return res, err
		}
		if err == nil {
			last = res
		}
	}
	return last, nil
}

// Press answers an approval button (data as Button.Data gave it) through
// Controller.AnswerApproval, with message id "answer:<request task id>" so
// that a double press makes one answer, then takes the buttons off the
// request's message (an edit: idempotent). It returns the answer's result
// (Duplicate set for a second press).
func (r *Relay) Press(ctx context.Context, c record.Conversation, data, sender string) (queue.EnqueueResult, error) {
	rest, ok := strings.CutPrefix(data, "ap:")
	short, verdict, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || (verdict != "y" && verdict != "n") {
		return queue.EnqueueResult{}, fmt.Errorf("relay: not a button of the relay: %q", data)
	}
	if r.cfg.Control == nil {
		return queue.EnqueueResult{}, errors.New("relay: no controller for approvals")
	}
	raw, err := r.st.Press(ctx, short)
	if errors.Is(err, redis.Nil) {
		return queue.EnqueueResult{}, fmt.Errorf("relay: unknown or expired approval button: %w", queue.ErrNoApproval)
	}
	if err != nil {
		return queue.EnqueueResult{}, err
	}
	var pv pressValue
	if err := json.Unmarshal([]byte(raw), &pv); err != nil {
		return queue.EnqueueResult{}, err
	}
	if pv.Chat != c {
		return queue.EnqueueResult{}, fmt.Errorf("relay: button of another chat: %w", queue.ErrNoApproval)
	}
	res, err := r.cfg.Control.AnswerApproval(ctx, queue.ApprovalReply{
		Request: pv.Request, Approve: verdict == "y", SenderID: sender, MessageID: "answer:" + pv.Request,
	})
	if err != nil {
		return res, err
	}
	decision := "approved"
	if verdict == "n" {
		decision = "denied"
	}
	word := answerWord(decision, record.AnswerByUser)
	// A second press changes nothing: the first one's edit stands.
	if ad := r.cfg.Adapters[c.Integration]; ad != nil && pv.MsgID != "" && !res.Duplicate {
		if err := ad.Edit(ctx, c, pv.MsgID, Message{Text: pv.Text + "\n\n" + word}); err != nil {
			r.log.Warn("relay: could not take the buttons off", "chat", c.String(), "err", err)
		}
	}
	return res, nil
}

// answerWord says how an approval request was answered, under its text.
func answerWord(decision, cause string) string {
	switch {
	case cause == record.AnswerExpired:
		return "⌛ Expired: denied."
	case cause == record.AnswerMovedOn:
		return "↪️ Denied: the conversation moved on."
	case decision == "approved":
		return "✅ Approved."
	case decision == "denied":
		return "❌ Denied."
	}
	return "Answered."
}

// unbutton takes the buttons off the request an answer turn answers (after
// an expiry, or a press another replica handled), once per turn: an edit,
// idempotent.
func (r *Relay) unbutton(ctx context.Context, ad Adapter, ch *chat, t *turn) error {
	raw, err := r.st.Press(ctx, pressShort(t.answers.RequestTaskID))
	if errors.Is(err, redis.Nil) {
		t.answered = true
		return nil
	}
	if err != nil {
		return err
	}
	var pv pressValue
	if err := json.Unmarshal([]byte(raw), &pv); err != nil || pv.MsgID == "" || pv.Chat != ch.conv {
		t.answered = true
		return nil
	}
	m := Message{Text: pv.Text + "\n\n" + answerWord(t.answers.Decision, t.answers.Cause)}
	if err := r.call(ctx, ch, "edit", func() error { return ad.Edit(ctx, ch.conv, pv.MsgID, m) }); err != nil && !errors.Is(err, ErrPermanent) {
		return err
	}
	t.answered = true
	return nil
}
