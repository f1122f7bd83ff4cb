package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// enqueue cancel <task-id|otid> | enqueue cancel --chat [integration:]chat_id --agent A [--all]:
// stop a turn (queue.Client.Cancel).

// cancelRequest builds the request of enqueue cancel from its arguments and flags; on bad
// input it says why.
func (o enqueueOpts) cancelRequest(ctx context.Context, args []string, rdb redis.UniversalClient) (queue.CancelRequest, error) {
	by := "enqueue cancel"
	if o.sender != "" {
		by = o.sender
	}
	r := queue.CancelRequest{By: by, Reason: o.reason, All: o.all}
	switch {
	case len(args) == 1 && o.chat == "":
		if o.all {
			return r, errors.New("--all goes with --chat: it cancels the chat's waiting turns too")
		}
		r.TaskID = args[0]
		if !strings.HasPrefix(args[0], "turn:") {
			r.TaskID, r.Otid = "", args[0] // an otid (or another kind of task id): matched whole
		}
		return r, nil
	case len(args) == 0 && o.chat != "":
		integration, chat := o.integration, o.chat
		if i, c, ok := strings.Cut(o.chat, ":"); ok {
			integration, chat = i, c
		}
		conv := record.Conversation{Integration: integration, ChatID: chat}
		if err := conv.Validate(); err != nil {
			return r, fmt.Errorf("--chat %q: %v", o.chat, err)
		}
		if o.agent == "" && o.dev {
			o.agent = DemoAgent
		}
		if o.agent == "" {
			return r, errors.New("--chat needs the chat's agent: --agent (or LETTAQ_AGENT_ID)")
		}
		id, _, err := resolveAgentArg(ctx, o, rdb)
		if err != nil {
			return r, err
		}
		r.Chat, r.AgentID = &conv, id
		return r, nil
	}
	return r, errors.New("cancel takes one turn: a task id or otid, or --chat [integration:]chat_id (with --agent)")
}

// cancel is enqueue cancel.
func (o enqueueOpts) cancel(ctx context.Context, args []string, connOpt asynq.RedisConnOpt, b budget.Config, rdb redis.UniversalClient, stdout, stderr io.Writer) int {
	r, err := o.cancelRequest(ctx, args, rdb)
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: cancel: %v\n", err)
		return ExitUsage
	}
	client, _, code := o.newClient(connOpt, b, rdb, stderr)
	if client == nil {
		return code
	}
	defer client.Close()
	cctx, done := context.WithTimeout(ctx, 15*time.Second)
	res, err := client.Cancel(cctx, r)
	done()
	_, invalid := queue.IsValidationError(err)
	switch {
	case invalid || errors.Is(err, queue.ErrNotFound):
		fmt.Fprintf(stderr, "enqueue: cancel: %v\n", err)
		return ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "enqueue: cancel: %v\n", err)
		return ExitFailed
	}
	if o.jsonOut {
		_ = json.NewEncoder(stdout).Encode(res)
	} else {
		for _, t := range res.Turns {
			switch t.Status {
			case queue.CancelDone:
				fmt.Fprintf(stdout, "cancelled %s: it was waiting and was never sent; its final event says cancelled\n", t.TaskID)
			case queue.CancelAsked:
				fmt.Fprintf(stdout, "cancelling %s: it is running; its worker asks Letta to stop it, and its final event says how it ended\n", t.TaskID)
			case queue.CancelAnswered:
				fmt.Fprintf(stdout, "%s was already answered (outcome %s): nothing changed\n", t.TaskID, t.Outcome)
			}
		}
	}
	if !res.Stopped() {
		fmt.Fprintf(stderr, "enqueue: cancel: already answered: nothing to cancel\n")
		return ExitFailed
	}
	return ExitOK
}
