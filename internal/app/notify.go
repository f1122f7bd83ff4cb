package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// enqueue notify --chat [INTEGRATION:]CHAT_ID [--key KEY] TEXT: write a message into a chat of
// the agent side's own accord (queue.Client.Notify).

// notice builds the notice of enqueue notify from its arguments and flags, checked before
// anything connects; minted is true when the key was made here (no --key). On bad input the
// error names the flag at fault.
func (o enqueueOpts) notice(args []string, stdin io.Reader) (n queue.Notice, minted bool, err error) {
	if o.chat == "" {
		return n, false, errors.New("--chat is required: the chat to write into, as INTEGRATION:CHAT_ID (e.g. --chat telegram:42)")
	}
	integration, chat := o.integration, o.chat
	if i, c, ok := strings.Cut(o.chat, ":"); ok {
		integration, chat = i, c
	}
	n.Chat = record.Conversation{Integration: integration, ChatID: chat}
	switch {
	case len(args) > 0:
		n.Text = strings.Join(args, " ")
	case stdin != nil && !IsTerminalReader(stdin):
		if n.Text, err = readStdinText(stdin); err != nil {
			return n, false, err
		}
	}
	n.Key = o.key
	if n.Key == "" {
		n.Key, minted = uuid.NewString(), true
	}
	if err := n.Validate(); err != nil {
		return n, minted, noticeFlagError(err, o)
	}
	return n, minted, nil
}

// noticeFlagError says which flag (or the text) a notice's validation error is about.
func noticeFlagError(err error, o enqueueOpts) error {
	ve, ok := queue.IsValidationError(err)
	if !ok {
		return err
	}
	switch ve.Field {
	case "chat":
		return fmt.Errorf("--chat %q: %s", o.chat, ve.Problem)
	case "key":
		return fmt.Errorf("--key: %s", ve.Problem)
	case "text":
		return fmt.Errorf("the text (argument or stdin) %s", ve.Problem)
	}
	return err
}

// notify is enqueue notify.
func (o enqueueOpts) notify(ctx context.Context, n queue.Notice, minted bool, connOpt asynq.RedisConnOpt, b budget.Config, rdb redis.UniversalClient, stdout, stderr io.Writer) int {
	if minted {
		// Before the call: if its outcome is not known, this is the key to send it again with.
		fmt.Fprintf(stderr, "enqueue: notify key %s (minted): to retry this notify without a second message, give --key %s\n", n.Key, n.Key)
	}
	client, _, code := o.newClient(connOpt, b, rdb, stderr)
	if client == nil {
		return code
	}
	defer client.Close()
	nctx, done := context.WithTimeout(ctx, 10*time.Second)
	res, err := client.Notify(nctx, n)
	done()
	var conflict *queue.NotifyKeyConflictError
	switch {
	case errors.As(err, &conflict):
		fmt.Fprintf(stderr, "enqueue: notify: --key: %v\n", err)
		return ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "enqueue: notify: %v (retry with --key %s: the same key writes it once)\n", err, n.Key)
		return ExitFailed
	}
	if o.jsonOut {
		_ = writeJSON(stdout, res, false)
		return ExitOK
	}
	if res.Duplicate {
		fmt.Fprint(stdout, termSafe(fmt.Sprintf("already notified %s with key %s (entry %s): nothing written again\n", n.Chat, res.Key, res.ID), true))
		return ExitOK
	}
	fmt.Fprint(stdout, termSafe(fmt.Sprintf("notified %s: task %s, entry %s\n", n.Chat, res.TaskID, res.ID), true))
	return ExitOK
}
