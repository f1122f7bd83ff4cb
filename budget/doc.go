// Package budget is lettaq's one source of truth for time: every clock the worker runs on
// one attempt of a turn, and the Asynq task timeout that must cover them all.
//
// # Why one package
//
// A turn is an Asynq task. Asynq cancels the handler's context when the task's timeout runs
// out, and a handler cancelled mid-turn is the worst outcome: the agent may be answering,
// the reply is lost, and the retry must first find out what happened. So the task timeout is
// not a guess: it is derived here from the same settings that bound the agent client and the
// continuation, and the tests check that nothing those packages are allowed to do can
// outlast it.
//
// # The clocks of one attempt
//
//   - connect (ConnectTimeout): the send gets no first byte of a response in time.
//   - stall (StallTimeout): the stream delivers no bytes at all; Letta's pings count, so this
//     must sit well above Letta's 20s ping interval (LettaPingInterval).
//   - content idle (ContentIdleNotice): only pings for a while; the agent is thinking. This
//     sends a progress notice and never aborts.
//   - total (StreamTotal): the cap on one streaming read, from the end of connect.
//   - stop grace (StopGrace): after stop_reason, how long to wait for the body to close.
//   - admission (AdmissionGrace): after a lost stream whose run is unknown, how long to look
//     for the turn's otid in the agent's history before concluding it was never admitted.
//   - continuation (ContinuationMax): how long to follow the run (resume its stream, then
//     poll it) after the stream is lost.
//   - each lookup or poll request (RequestTimeout), and the backoff between tries
//     (PollInitial, PollMax, PollMultiplier, PollJitter).
//
// # The formula
//
// The worst case of one attempt is: connect + stream + admission + continuation, the same
// again when the resend policy allows one resend (a message with no trace in the agent's
// history is sent once more, with the same otid), then delivery (writing reply events and
// the result). TaskTimeout adds the safety margin and rounds up to whole seconds:
//
//	TaskTimeout = ceil_s( ConnectTimeout + StreamTotal + AdmissionGrace + ContinuationMax
//	                    [ + ConnectTimeout + StreamTotal + AdmissionGrace + ContinuationMax ]
//	                    + DeliveryAllowance + SafetyMargin )
//
// With the defaults: 30s + 5m + 30s + 10m, twice (ResendIfNotAdmitted), + 10s + 30s = 32m40s
// (16m40s with ResendNever). Terms lists the same terms by name, for logs and docs.
//
// A stream that ends with stop_reason needs no admission search or continuation; it spends
// at most StopGrace waiting for the body to close instead, which Validate keeps within
// ContinuationMax, so that path is covered too. The formula is an upper bound: a real
// attempt that finds its run does not resend, so it never spends every term.
//
// The admission search and the follow repeat requests and sleeps. They stay inside their
// windows because every request timeout and every sleep is clamped to what remains of the
// window (Loop, Config.ClampSleep, Config.ClampRequest); without the clamp the last try
// would run past the window by up to two request timeouts and a backoff delay (or a whole
// resumed stream). Config.Simulate runs
// that schedule, every request at its timeout and every sleep at its jittered maximum, by
// driving the very Loop the continuation uses on a virtual clock; the property test checks,
// for thousands of random valid configurations, that it ends within
// TaskTimeout − SafetyMargin. It does so for every Path the continuation's code can take
// (SimulatePath): a lost stream (search, then follow: a GET of the run, a resume bounded by
// the follow window's deadline, polls), a conversation send resumed by its otid before the
// search, a busy 409 naming the turn's own run, and an approval answer; the continuation's
// TestCodeFollowsTheBudgetModel runs the real code down each path against a server that
// makes every wait as long as its clock allows, and fails when the code spends more than
// its model. The margin is then left for what no schedule models: the
// handler's own bookkeeping, Redis round trips, and scheduling delays.
//
// # Alignment with Asynq
//
// Asynq stores a task's timeout as whole seconds, truncating (int64(timeout.Seconds())), and
// a stored 0 means "not set", which Asynq replaces with its 30-minute default. So a budget of
// 1.5s would be stored as 1s, and 0.5s as "30 minutes". TaskTimeout therefore rounds up to
// whole seconds and is never below 1s: the value Asynq stores is never less than the budget.
// Asynq computes the handler's deadline when a worker picks the task up (now + timeout), and
// each retry is a new attempt with a fresh deadline, so the budget is per attempt: pass
// asynq.Timeout(cfg.TaskTimeout()) when enqueueing, from the same Config the worker runs
// with.
//
// # Configuration
//
// FromEnv reads the LETTAQ_* variables listed by Vars over Default, then validates;
// RegisterFlags adds one flag per variable (LETTAQ_STALL_TIMEOUT → --stall-timeout) whose
// defaults are the values already loaded, so flags override the environment, which
// overrides the defaults. Validate reports every broken rule at once (errors.Join of
// *RuleError, each naming its variables); FromEnv adds a *ParseError per unparsable value.
// Warnings reports settings that are valid but likely unintended.
//
// budget imports nothing from lettaq, only the standard library.
package budget
