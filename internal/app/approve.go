package app

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// enqueue approve|deny <task-id|otid> [--reason TEXT] [--wait]: the answer
// to an approval request, a turn of its own (queue.Client.AnswerApproval).

// runAnswer enqueues the answer and, with --wait, follows it like a message.
func runAnswer(ctx context.Context, o enqueueOpts, verb string, args []string, client *queue.Client, replies *queue.Replies, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintf(stderr, "enqueue: %s takes one argument: the task id or otid of the turn that asked for approval\n", verb)
		return ExitUsage
	}
	r := queue.ApprovalReply{Request: args[0], Approve: verb == "approve", Reason: o.reason, SenderID: o.sender, MessageID: o.messageID}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := client.AnswerApproval(ectx, r)
	cancel()
	var conv record.Conversation
	if err == nil {
		conv, err = client.ApprovalConversation(ctx, args[0])
	}
	switch _, invalid := queue.IsValidationError(err); {
	case invalid || errors.Is(err, queue.ErrNoApproval):
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitUsage
	case err != nil:
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitFailed
	}
	if o.jsonOut {
		_ = json.NewEncoder(stdout).Encode(res)
	} else if !o.wait || !IsTerminal(stdout) {
		dup := ""
		if res.Duplicate {
			dup = " (the request was answered before: no second answer)"
		}
		fmt.Fprintf(stderrIfWait(o.wait, stdout, stderr), "enqueued answer task %s otid %s on queue %s%s\n", res.TaskID, res.Otid, res.Queue, dup)
	}
	if !o.wait {
		return ExitOK
	}
	return follow(ctx, replies, conv, res, "0", o, stdout, stderr)
}

// imagesValue is --image, repeatable: an http(s) URL, or @file read and
// sent as base64 with the media type its extension names.
type imagesValue struct{ p *[]queue.Image }

func (v imagesValue) String() string { return "" }

func (v imagesValue) Set(s string) error {
	if !strings.HasPrefix(s, "@") {
		*v.p = append(*v.p, queue.Image{URL: s})
		return nil
	}
	path := s[1:]
	mt := mime.TypeByExtension(strings.ToLower(filepath.Ext(path)))
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	if !strings.HasPrefix(mt, "image/") {
		return fmt.Errorf("%s: name a .png, .jpg, .gif or .webp file", path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() > queue.MaxImageBytes {
		return fmt.Errorf("%s is %d bytes, more than the limit of %d", path, st.Size(), queue.MaxImageBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	*v.p = append(*v.p, queue.Image{MediaType: mt, Data: base64.StdEncoding.EncodeToString(data)})
	return nil
}

// answer is enqueue approve|deny: the client as for a message, then runAnswer.
func (o enqueueOpts) answer(ctx context.Context, verb string, args []string, connOpt asynq.RedisConnOpt, b budget.Config, rdb redis.UniversalClient, stdout, stderr io.Writer) int {
	client, replies, code := o.newClient(connOpt, b, rdb, stderr)
	if client == nil {
		return code
	}
	defer client.Close()
	return runAnswer(ctx, o, verb, args, client, replies, stdout, stderr)
}

// queueOrdering is the ordering of o's client: the workers' (--ordering, --wait-check).
func (o *enqueueOpts) queueOrdering() queue.Ordering {
	ord := queueOrdering(o.ordering, o.prefix)
	ord.WaitCheck = o.waitCheck
	return ord
}

// checkOrdering normalizes --ordering and refuses a value the workers do not know (RunEnqueue
// calls it with the other settings, before anything connects).
func (o *enqueueOpts) checkOrdering() error {
	switch o.ordering = strings.ToLower(o.ordering); o.ordering {
	case "conversation", "agent", "off":
		return nil
	}
	return fmt.Errorf("--ordering (LETTAQ_ORDERING) %q: want conversation, agent or off", o.ordering)
}

// newClient is the queue client (and the reply streams it writes the accepted event to) for a
// message or an answer, with o's queue, retries and ordering (checked: checkOrdering); on a
// bad setting it says why on stderr and returns nil and the exit code.
func (o *enqueueOpts) newClient(connOpt asynq.RedisConnOpt, b budget.Config, rdb redis.UniversalClient, stderr io.Writer) (*queue.Client, *queue.Replies, int) {
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: o.prefix, StreamTTL: o.streamTTL})
	client, err := queue.NewClient(queue.ClientConfig{Redis: connOpt, Budget: b, Queue: o.queueName, Shards: o.shards,
		MaxRetry: maxRetry(o.maxRetry), Replies: replies, Ordering: o.queueOrdering()})
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return nil, nil, ExitUsage
	}
	return client, replies, ExitOK
}

// showApproval tells what the agent wants to run and how to answer: hint (nil: a bare
// "enqueue …") writes the commands, runnable as printed.
func showApproval(w io.Writer, ev record.ReplyEvent, hint func(args ...string) string) {
	if hint == nil {
		hint = func(args ...string) string { return "enqueue " + strings.Join(args, " ") }
	}
	var calls []record.ToolEvent
	if ev.Approval != nil {
		calls = ev.Approval.Calls
	} else if ev.Tool != nil {
		calls = []record.ToolEvent{*ev.Tool}
	}
	fmt.Fprintf(w, "approval required: the agent wants to run:\n")
	for _, c := range calls {
		fmt.Fprintf(w, "  %s %s (call %s)\n", c.Name, c.Arguments, c.CallID)
	}
	fmt.Fprintf(w, "answer with:\n  %s\nor:\n  %s\n", hint("approve", "--wait", ev.TaskID), hint("deny", "--wait", "--reason", "not now", ev.TaskID))
}
