// Package queue makes every inbound chat message one durable agent turn: an
// Asynq task that a Worker runs against a Letta agent, with progress and the
// answer written to a Redis Stream per conversation, and a journal of every
// attempt.
//
// # The flow
//
//		integration ──Client.Enqueue──▶ Asynq task "lettaq:turn" ──▶ Worker ──▶ continuation.Runner ──▶ Letta
//		     ▲                                                          │
//		     └──────── reply events (Replies: XREAD the stream) ◀───────┘   journal (Journal)
//
//	 1. Client.Enqueue validates the Message (typed *ValidationError naming the
//	    field), derives the task id from the integration's message id
//	    ("turn:<integration>:<chat_id>:<message_id>", '%' and ':' in each part
//	    percent-encoded, hashed when longer than 200 bytes; see TaskIDFor) so
//	    that a webhook delivered twice makes one task (the second
//	    Enqueue returns the same id with Duplicate set; the same message id
//	    with another text is refused, *MessageIDConflictError), and enqueues with
//	    Timeout(budget.TaskTimeout()), MaxRetry, Queue and Retention. It writes
//	    the accepted event. httpapi.EnqueueHandler does the same over HTTP.
//	    With ClientConfig.Shards > 1 the task goes to its chat's shard's
//	    queue, its id naming the shard (shards.go, package queue/shard), and
//	    the Worker takes from every shard's queue.
//	 2. The Worker's handler, on every attempt: reads the journal record (the
//	    run id an earlier attempt learned, whether it journaled an intent to
//	    send); derives the otid (the payload's, else
//	    a UUID (version 5) of the task id, see OtidFor: the same on every attempt,
//	    whether the task was retried, recovered after a crash, or put back at
//	    shutdown); journals the intent to send *before* the send; and runs the
//	    turn with continuation.Runner: send, stream, continue the run after a
//	    lost stream, and resend (same otid) only when there is no evidence the
//	    message was admitted and the policy allows it. The run id is journaled
//	    as soon as the stream names it, so a crash mid-stream still leaves it.
//	 3. The Result (continuation.Result) is mapped to reply events, the journal and Asynq (below).
//
// Client.Notify (httpapi.NotifyHandler over HTTP) writes a message of the agent
// side's own accord into a chat: one notify event in its reply stream, once
// per key (notify.go).
//
// # Guarantees
//
//   - One user message per turn at the agent: the otid is stable, the intent
//     is journaled before every send, and an attempt that finds an earlier
//     intent looks for the otid in the thread's history before it may send;
//     on a Letta conversation (ThreadMode) the server also replays a
//     background send whose otid it has seen, for 3 hours.
//   - At most one final event per turn (answer, approval_required, or error
//     with permanent true), written with Replies.EmitAnswerOnce; and at least
//     one, unless Redis itself is gone: every path that ends the task
//     (success, permanent failure, last retry) writes it first.
//   - A Redis outage strands no turn: an attempt that saw a Redis read or
//     write fail ends (releases its conversation, returns to Asynq) only once
//     Redis answers again, on the worker's connection and on Asynq's, or its
//     task context ends. Asynq v0.26 records an attempt's end with one write
//     that it never really retries; a task whose end was lost stays active
//     until Asynq's lease recovery, 1 to 2 minutes later.
//   - A killed worker's turns continue on another worker within seconds
//     (WorkerConfig.Takeover.After, default 5s, after its last beat), not
//     when Asynq's lease gives them back: see takeover.go. The takeover
//     runs the turn under its own identity (task id, otid, journal record,
//     line) and uses none of its retries; the original task, recovered by
//     Asynq later, finds the turn taken over and ends without writing. A
//     worker that was only paused or cut off and finds it was taken over
//     stops those turns and writes nothing more for them (fencing). One
//     runner of a turn at a time: a turn that a live runner holds is not
//     taken over, and a runner stops once a runner that started after it
//     registered the turn; the journal keeps the record of the newest
//     runner (a save of an earlier one writes nothing: journal.Saver.SaveOp).
//   - The handler returns before Asynq's deadline: the work runs under a
//     context that ends DeliveryAllowance + SafetyMargin/2 before it, and
//     the budget sizes the task timeout for the worst case.
//   - Bad input is archived at once (asynq.SkipRetry) with the reason as
//     the task's last error, nothing is sent to the agent, and an error event
//     is written when the conversation can be read from the payload.
//
// # Error mapping
//
//	continuation outcome                      reply event (final)        journal outcome     Asynq
//	Completed                                 answer                     answered            nil (result written)
//	Completed, stop requires_approval         approval_required          approval_required   nil (result written)
//	Failed (run failed or was cancelled)      error, permanent           failed              SkipRetry → archived
//	Failed before anything was sent           –                          retrying            retry after the backoff
//	Rejected (404 agent, 4xx)                 error, permanent           failed              SkipRetry → archived
//	Rejected, retryable (409 other)           –                          retrying            retry after Retry-After or the
//	  (also: the chat's conversation not                                                     backoff, whichever is longer
//	  resolved, Letta unreachable)
//	Rejected, 409 pending approval            error, permanent           failed              SkipRetry → archived
//	Busy (409 busy, another run)              –                          busy                put back (no retry used) for Retry-After or 1s…16s
//	Refused (503 deploy, 429 API rate limit)  – (phase says which)     not_admitted        retry after Retry-After ≤ MaxServerRetryAfter, else 2s…1m; intent withdrawn
//	Rejected, 429/402 account limit           error, permanent (cause)   failed              SkipRetry → archived
//	NotAdmitted, model rate limit (BackOff)   – (phase rate_limited)     not_admitted        retry after 2s doubling, ≤1m; next attempt looks first
//	StillRunning (budget spent, run alive)    –                          still_running       retry after StuckRetryDelay
//	StillRunning, history or run unreadable   –                          still_running       retry after StuckRetryDelay or the
//	                                                                                         backoff, whichever is longer
//	NotAdmitted, resend forbidden             error, permanent           failed              SkipRetry → archived
//	NotAdmitted after a resend                –                          not_admitted        retry after the backoff; next attempt
//	                                                                                         looks first
//	Interrupted (shutdown, deadline)          –                          retrying            interrupted → retry in 100ms
//	Cancelled (Client.Cancel), run not done   error, permanent (stop     cancelled           nil (result written: completed, not failed)
//	  (cancelled by Letta, or never sent)      reason cancelled)
//	Cancelled, the run completed first        answer                     answered            nil (result written)
//	invalid payload                           error, permanent (if readable) failed          SkipRetry → archived
//	any retry on the last allowed attempt     error, permanent           failed              SkipRetry → archived
//	a put-back with no retry left (a crash    error, permanent           failed              SkipRetry → archived
//	  used the one kept for put-backs)
//	not its turn (ordering)                   –                          – (a Wait)          parked: RevokeTask, enqueued again scheduled with the retries it had left (no retry used)
//	cancelled while waiting (never sent)      error, permanent           cancelled           deleted by the canceller, or nil (result written)
//	merged into another turn (coalescing)     by the answering turn      coalesced           nil
//	message, its chat's approval unanswered   phase awaiting_approval    – (a Wait)          parked (policy wait, deny; with or without ordering)
//	  (ApprovalPolicy error)                  error, permanent           failed              SkipRetry → archived
//
// The rows from Completed to the put-back with no retry left are endOf's
// (queue/internal/attempt): a pure function from the decision to the final event, the
// journal's outcome and what Asynq is told, which the turn then applies;
// TestEndOfTable holds it to this table row by row. The others are decided
// before there is a decision (the payload, the conversation's line, an
// approval waiting).
//
// An approval answer (Message.Approval, made by Client.AnswerApproval) is a
// turn like a message: the same table applies to it (see approval.go).
//
// A Rejected send was refused by the server with a 4xx before anything was
// stored, so the attempt withdraws its intent (Journal.RecordRefusal), as a
// Busy one does: the retry of a 409 "conversation busy" sends at once, under any resend
// policy, instead of looking for an otid that cannot be there. A 5xx, a 429
// or a cut connection never withdraws an intent.
//
// "The backoff" is 1s doubling per retry already made, capped at 1 minute
// (attempt.RetryBackoff): a failed attempt is never retried sooner, whatever delay
// its path or the server asked for, so that the retries of a turn
// (MaxRetry, 25 by default) span about 20 minutes of waits and a Letta
// outage or restart of minutes loses no message (go test ./queue -run
// TestTransientRetriesBackOff -v prints the figure). A run still alive
// and an interruption are no failures: they retry after StuckRetryDelay
// and 100ms. The attempt journals its delay (record.Attempt.RetryIn; journal
// show prints "next attempt in"); a shutdown interruption does not count
// as a failed try. Run configures the delays in Asynq (with ordering's
// put-back, see ServerConfig).
//
// # Reply events
//
// The events of a turn, in order: accepted (at enqueue, or at the first
// attempt if the client did not write it), phase (connecting, streaming,
// thinking, tool_running, recovering, continuing; repeated every
// HeartbeatInterval so typing indicators stay alive), tool (status call when
// the call has its name, then success or error with the return),
// answer_delta (line-buffered; reasoning with narration true), and one final
// event. Each carries task_id, otid, run_id and message_id. The wire format
// is docs/reply-events.md in the repository (see Replies); read it with XREAD
// from any language, or with Replies.Read, as record.ReplyEvent values
// (package queue/record holds the records lettaq writes and users read).
//
// Progress events (phase, tool, answer_delta) are written in order off the
// goroutine that reads the agent's stream, so a slow or restarting Redis
// never holds the read (and never fires its stall clock); the final event
// waits until they are written (for at most half of the delivery
// allowance). While Redis is down at most 256 wait per turn: phase events
// are dropped first, and what is still waiting when the attempt ends is
// dropped (logged with the count).
//
// # Journal
//
// Journal keeps, per turn (key <prefix>journal:turn:<task_id>): the outcome,
// latency, time to first token, queue wait, token usage, a per-tool summary
// (name, duration from call to return, status), warnings (duplicate tool
// call ids; tool calls left unanswered by a cancelled run), resends; and per
// attempt: worker, start and end, the phase timeline, which clock fired
// (connect, stall, total), polls and resumes, the resend decision, outcome
// and error: a record.TurnRecord. Query it with Journal.Get, ByOtid or
// Recent (filters: stalls, retries, resends, failures).
//
// # Tasks from other languages
//
// A turn is an Asynq task of type "lettaq:turn" whose payload is the JSON of
// Payload (version 1). Enqueue it with task id TaskIDFor's rule, queue
// "lettaq" (or the workers' queue), max retry 26 (the 25 retries of a
// failed attempt, and one more that the worker keeps for put-backs: Asynq
// v0.26 archives a task whose retries are used up even when its handler only
// put it back to wait; see ClientConfig.MaxRetry), timeout = the workers'
// budget TaskTimeout in whole seconds, and retention 24h; or simply POST the
// payload to the HTTP handler that cmd/worker mounts (queue/httpapi.EnqueueHandler).
//
// # Ordering
//
// WorkerConfig.Ordering and ClientConfig.Ordering (on by default) run the
// turns of one conversation one at a time, in enqueue order, across all
// workers (package ordering): Client.Enqueue joins the turn to its key's
// line before the enqueue (also for a duplicate: idempotent) and reports its
// Position, also in the accepted event; a turn with turns ahead of it is
// enqueued as a scheduled task (Ordering.WaitCheck ahead, 10 minutes: only
// a safety net), which the turn ahead moves to pending when it ends. The
// handler acquires the key before the attempt; a turn taken before its
// turn parks (queue/internal/line): its task is revoked (no retry used, no attempt
// journaled, one Wait in its record) and enqueued again with its id,
// scheduled Ordering.WaitCheck ahead, until the turn ahead wakes it; a
// message behind its chat's open approval request parks the same way. It
// runs the attempt
// under the lease (a lost lease interrupts it), and releases it after:
// done when the turn ended (answered, failed, archived), so the next one is
// woken at once; not done when it will be retried, so it keeps its place.
// The key is Ordering.Key: agent + integration + chat, or the agent alone
// with ordering.ScopeAgent. The journal's QueueWait includes the wait for
// the key.
//
// Coalescing (Ordering.Coalesce, per integration, off by default): the turn
// that gets the key takes the tasks waiting right behind it and sends their
// texts with its own as one user message (texts in order, separated by a
// blank line, "sender: " before each when the senders differ; a retried
// attempt rebuilds the same text). Each merged task ends at once with
// journal outcome "coalesced" and AnsweredBy naming the turn; when the turn
// ends it writes each merged message's final event: an answer with
// answered_by and no text (the text is in the turn's own answer, which
// carries answered_by too), or a permanent error if the turn failed.
package queue
