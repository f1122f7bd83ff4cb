// Package ordering runs the turns of one conversation one at a time, in the
// order their messages were enqueued, across any number of worker
// processes; different conversations run in parallel.
//
// # The bug it prevents
//
// A chat user sends a second message while the agent still answers the
// first. With a plain queue both turns run at once on the same Letta agent:
// the answers interleave in its history, or the reply to message 1 arrives
// as the answer to message 2. Per conversation key, ordering guarantees:
//
//   - at most one turn holds the key at any moment (a lease-backed lock);
//   - turns start in enqueue order (a FIFO line: only the head may run);
//   - a turn that is still running at the agent when its attempt ends
//     (Release with done=false) keeps its place at the head, so no later
//     message overtakes it;
//   - a worker killed while holding a key leaves its task at the head: once
//     the task runs again, it re-acquires the key at once (a takeover,
//     below) and finishes. Order holds. lettaq's workers run it again
//     within seconds (package queue's fast takeover: a task of their own
//     that acquires by the turn's task id); without that, Asynq recovers it
//     (its own lease, 30s, plus the recoverer's 30s margin: a minute or
//     two). The lock itself lives at most a
//     lease (Config.Lease, default 1m) past the last renewal, which bounds
//     how long a head that finished without releasing (Redis failed at that
//     moment) blocks the key before the dead-head check removes it.
//
// # Conversation keys
//
// A key names what must be serialised. KeyFor(ScopeConversation, …) (the
// default) is agent + integration + chat; ScopeAgent (AgentKey) serialises
// everything one agent does, for an agent shared by many chats (it has one
// message history). Keys are escaped so that parts cannot run into each
// other and never contain braces.
//
// # Key layout
//
// With Config.Prefix P (default "lettaq:ord:"), for a conversation key K:
//
//	P line:{K}            ZSET   member task id, score = order (see below)
//	P lock:{K}            HASH   task, token (one per Acquire), holder; PX lease
//	P merged:{K}:<task>   STRING head task id the task was merged into; PX MergedTTL
//	P group:{K}:<head>    LIST   the tasks merged into head, in order; PX MergedTTL
//	P group:{K}:<head>:take  STRING JSON [token, task…]: the last TakeFollowers call that
//	                      took any, and what it took (a call sent again returns it); PX MergedTTL
//	P done:{K}:<task>     STRING "1": the task's turn finished; PX DoneTTL
//
// Every key of one conversation carries the hash tag {K}, so all of them
// live in one Redis Cluster slot and every script is single-slot (the
// prefix must not contain braces; New rejects it). There is no global key:
// the design's global INCR counter is replaced by a per-line score,
// max(join time in ms × 1000, highest score + 1): strictly increasing
// within a line (the order), no cross-slot key, nothing that grows
// forever, and floor(score/1000) is the join time (used by the dead-head
// grace). Scores stay below 2^53, so they are exact.
//
// All mutations are Lua scripts (atomic): join, acquire (merged check, auto
// join, head check, lock check, lock set), dead-head removal (only if it is
// still head and the lock is free), compare-and-extend, release
// (compare-and-delete, optional removal from the line, new head), take
// followers.
//
// # The lease
//
// Acquire sets the lock with a fresh token, PX Config.Lease, and the
// Sequencer extends it every Config.RenewEvery (Lease/3) only while the lock
// still holds that token. A Sequencer renews all the leases it holds
// together: one timer, and one round trip per renewal tick that extends
// every lock due (on a single Redis one script over many locks; on Redis
// Cluster a pipeline of one-lock scripts, one round trip per node). Leases
// due within RenewEvery/2 of each other share a tick, so a worker makes
// about two renewal round trips per RenewEvery however many turns it runs;
// with no lease held nothing runs. If the extension finds another token or
// no lock, or Redis stays unreachable for a whole lease, Lease.Lost is
// closed (and Lease.Context cancelled with ErrLeaseLost): the turn must
// stop, someone else may run the key. Release takes the lease out of the
// renewal and waits for a renewal in flight that includes it (no leak),
// deletes the lock only if it is still ours, and is idempotent.
//
// The default lease, one minute, is longer than Asynq's own (30s) on
// purpose: the lock does not decide when a killed worker's turn runs again
// (package queue's takeover or Asynq's recovery does, and that attempt
// takes the lock over by task id), a worker cut off from Redis has its handler cancelled by Asynq
// after 30s anyway, and a longer lease halves the extensions (one per lock
// every 20s). What it lengthens: a head that finished but could not
// release blocks its key up to a minute, and an attempt taken over is told
// (Lost) at its next renewal, up to 20s later.
//
// Re-acquire by the same task: Acquire succeeds when the lock is held by
// an earlier attempt of the same task id (Asynq recovered it from a dead
// worker, or the previous attempt returned without releasing). It takes
// the lock over with a new token, so the earlier attempt, if it is in fact
// still alive (a partitioned worker), loses its renewal and sees Lost
// instead of silently running side by side. (Refinement: the lock compares
// tokens, not task ids, for exactly this reason.)
//
// # Dead heads
//
// A head that will never run (deleted, archived, completed without a
// Release because Redis blinked) would block its key forever. When a task
// is not the head and the lock is free, Acquire asks alive(head) (backed by
// asynq's Inspector: InspectorAlive) and removes a dead head, re-checking
// up to Config.MaxSkips times. It never asks while the lock is held (a
// running head is alive), and an error from alive counts as alive (never
// drop a turn on a hunch). Refinement: a head that joined less than
// Config.DeadHeadGrace (5s) ago is never judged dead, because a client
// that calls Join just before its Enqueue reaches Redis would otherwise
// have its fresh task removed as "not found". The join time is the
// joining client's clock; one more than a grace ahead of the judging
// clock is taken for a fast clock and gets no grace (else it would keep a
// dead head, and every join behind it, for as long as the clock is
// ahead). The head's task may be in any Asynq queue (InspectorAlive looks
// in all of them, FindTask). A task that is not next and removes a dead
// head is told so (NotYourTurnError.RemovedDead): it should Wake the new
// head, whose turn ahead will never end to wake it.
//
// # Auto-join (decided: on by default)
//
// A task that reaches Acquire without having joined (enqueued before
// ordering was enabled, or by a client that died between Enqueue and Join,
// or a head removed as dead by mistake) joins the line at the tail inside
// the acquire script. Without it such a task would wait forever, since no
// one would ever let it be head. Its place is then "when it first ran",
// which is the best order known for it. Config.NoAutoJoin turns this off
// (Acquire returns ErrNotJoined) for callers that would rather run such a
// task unordered or fail it.
//
// A merged task (below) never auto-joins: Acquire checks its merged marker
// first and returns *MergedError. Nor does a finished one (refinement):
// Release(done) leaves a done marker (Config.DoneTTL, 24h), so that a
// duplicate delivery of a finished task (Asynq is at-least-once: a worker
// that dies between the handler's return and the ack gets its task
// recovered and run again) gets ErrDone instead of joining the tail and
// running a second turn, and a late or retried Join (or JoinFront) of it
// returns -1, as for a merged task. The
// concurrency test found this: without the marker, a finished task picked
// again re-joined and ran twice.
//
// # Coalescing
//
// Off unless the caller uses it. The head's turn, holding its lease, may
// call TakeFollowers to take the tasks queued right behind it (messages
// that arrived while the key was busy) out of the line and send their
// texts with its own as one user message. Each taken task gets a merged
// marker; when Asynq runs it later, Acquire (or MergedInto) reports the
// head, and the handler ends at once, successfully, with "answered by
// <head>". A retried attempt of the head calls MergedFollowers to rebuild
// the same merged message. (Refinement: MergedInto takes the key too, so
// that the marker lives in the conversation's slot and the acquire script
// can check it atomically.) If the head fails for good, the merged
// messages fail with it; the caller reports that on their reply streams.
//
// # Asynq integration
//
// Client (enqueue side), per message:
//
//	info, err := client.Enqueue(task, asynq.TaskID(id), asynq.MaxRetry(n>0), …)
//	_, err = seq.Join(ctx, key, id) // also on ErrTaskIDConflict (idempotent)
//
// Enqueue then Join: the task exists in Asynq before it can be a head, so
// alive never sees it missing; if the client dies in between, auto-join
// places it. (Join then Enqueue works too, thanks to the grace; if the
// Enqueue fails, call Remove only when JoinAdded said this call added the
// task: a duplicate's join changed nothing, and its Remove would take the
// original's place.) A task that leaves its line without running (cancelled,
// given up) leaves with Leave and Wakes the task it returns: the new head,
// learnt in the removal's own script, so that a turn ahead ending at the
// same moment cannot leave it unwoken.
//
// Server:
//
//	asynq.Config{
//		IsFailure:                ordering.IsFailure,  // and-ed with your own
//		RetryDelayFunc:           ordering.RetryDelay, // put-back, see RetryPolicy
//		DelayedTaskCheckInterval: time.Second,         // default 5s delays put-backs
//	}
//
// Handler, per task:
//
//	lease, err := seq.Acquire(ctx, key, id, workerID, ordering.InspectorAlive(insp, queue))
//	if ordering.IsMerged(err) || errors.Is(err, ordering.ErrDone) {
//		return nil                         // answered by the head / already done
//	}
//	if err != nil { return err }               // NotYourTurn: put back, no retry used
//	ctx, cancel := lease.Context(ctx)          // stop the turn if the lease is lost
//	defer cancel()
//	… optional: followers, _ := seq.TakeFollowers(ctx, key, id, max) …
//	… run the turn …
//	next, _ := lease.Release(context.WithoutCancel(ctx), done)
//	if done { _ = seq.Wake(ctx, insp, queue, key, next) } // wake the next turn now
//
// done is true when the turn ended for good: answered, failed permanently,
// or on its last retry (it will be archived); false when it will be
// retried (still running at the agent, interrupted, transient error): then
// it keeps the head and the key waits for its retry.
//
// Asynq v0.26 archives a task whose retries are used up (Retried ≥
// MaxRetry) even on an error that is not a failure, so a task must keep a
// retry for its put-backs: give it one retry more than its failures may use
// (lettaq's client does), and end a task with no retry left yourself
// instead of putting it back; a NotYourTurn never increments Retried. An
// archived head is removed by the dead-head check. Wake matters: a waiting task sits in Asynq's retry set, which is
// forwarded only every DelayedTaskCheckInterval; Wake moves the next head
// to pending at once (Inspector.RunTask), and, if its put-back has not
// landed yet (still active), waits for it briefly. It never runs an
// archived task.
//
// Package queue does not put a waiting task back: it parks it (ends the
// task with asynq.RevokeTask after writing what is needed to enqueue it
// again, then enqueues it again with the same id, scheduled far ahead), so
// that a task waiting for hours neither polls nor shows in Asynq's Retry
// state; its wake-up also handles a task that is parked at that moment,
// and its AliveFunc counts a parked task as alive. The put-back described
// here remains for a caller that uses this package alone.
//
// # Put-back delays (refinement)
//
// A flat 200ms..1s put-back makes a long line churn: every waiting task
// comes back to the pending list every second, and the task Wake moved to
// pending lands behind all of them. RetryPolicy scales the delay by the
// position in the NotYourTurnError (position k waits k × 200ms..1s, capped
// at 10s); the next in line still polls every 200ms..1s as a safety net,
// and the rest are reached through the Wake chain. On one hot key with
// 1000 queued no-op turns this took throughput from ~10 to ~43 turns/s
// and put-backs from ~16 to ~1.8 per turn.
//
// # Cost
//
// An ordered turn costs three extra round trips (acquire, release, and the
// GetTaskInfo of Wake; RunTask when the next task was parked). Renewals
// cost one round trip per tick per Sequencer (worker), not per turn: 3 to 6
// a minute with the default lease, whether it holds one turn or 10,000
// (then one script extends 500 locks, 20 scripts in one pipeline). A hot
// key runs one turn at a time by design: its rate is bounded by the turn
// plus Asynq's pickup latency (about TaskCheckInterval after Wake), e.g.
// ~43 no-op turns/s at 20ms, which is noise next to a Letta turn of
// seconds.
package ordering
