// Package continuation carries a Letta turn to its result after its stream is
// lost, instead of sending the message a second time.
//
// A chat turn can outlive its stream: a proxy cuts the connection, the stall
// clock fires while the agent runs a slow tool, a 5xx answers a request that
// the server had already stored. The common answer, a timeout then a resend,
// gives the agent the same message twice. A Runner instead
//
//  1. sends the message once, with the turn's otid, through
//     agentclient.SendStream, keeping what the stream taught in the caller's
//     agentclient.StreamState;
//  2. when the stream ends without a stop reason, resolves the run: from the
//     state (the run id came with the first ping), for a turn sent to a
//     Letta conversation (Turn.ConversationID) by asking the conversation's
//     stream endpoint for the otid's run, or by finding the user message
//     with the turn's otid in the thread's history (the conversation's, or
//     the agent's), newest first, retrying for up to the admission grace
//     because the server may store it late;
//  3. follows the run: resumes its stream from the last seq_id when it is a
//     background run (and LETTAQ_RESUME is on), otherwise, or when resume is
//     refused (400, 410, 503) or stalls, polls the run and its messages after
//     the last message id seen, so each poll costs only what is new, whatever
//     the length of the history (a server that ignores the cursor is asked
//     for the whole run in one larger page, never for the same page again);
//     merges what arrives into the same transcript, in the messages' own
//     order (their dates, not the list's), without duplicating steps; a
//     resumed stream drops the chunks it was given before (a server that
//     ignores starting_after);
//  4. decides.
//
// A conversation send is always background: Letta maps its otid to its run
// for 3 h and answers a resend with that run's stream instead of starting
// another, a second line of defence behind the gate. A conversation takes
// one run at a time: a 409 busy naming a run with the turn's otid is followed
// as the turn's own run; one naming another run is the Busy outcome (retry
// later, no resend); a 409 pending approval is Rejected, not retryable.
//
// Every request and sleep is paced by budget.Loop, whose windows the task's
// Asynq timeout is computed from (budget.Config.TaskTimeout), so a result is
// always reached before the queue's deadline.
//
// # Results
//
//	Outcome       when                                                 next step for the queue
//	Completed     run ended end_turn, max_steps, tool_rule,            deliver the answer (or the approval
//	              requires_approval                                    request); done
//	Failed        run ended with a failure stop reason (WIRE.md's      report; never resent automatically
//	              table), one this version does not know, or           (a resend would be a second message)
//	              cancelled, whatever text came before; Retryable
//	              tells whether the same message could succeed later
//	              (llm_api_error yes, cancelled no)
//	StillRunning  budget spent with the run alive; or the message is   retry later; the next attempt follows
//	              stored but names no run yet; or the history could    the same run (PriorIntent), never sends
//	              not be read at all
//	NotAdmitted   no run id, and at least one complete search of the   the gate: resend with the same otid if
//	              history found no message with the otid within the    LETTAQ_RESEND_POLICY=if-not-admitted,
//	              admission grace                                      else a permanent error
//	Rejected      the send was refused permanently (unknown agent,     report; permanent unless Retryable
//	              validation, credits): nothing was stored; or the
//	              thread is gone (its history answers 404: a
//	              conversation deleted mid-turn)
//	Interrupted   the caller's context ended                           retry; the state and journal keep
//	                                                                   what was learned
//
// # The resend gate
//
// A message may be sent a second time only through one door, and only when
// there is no evidence at all that the first send was admitted:
//
//	run id in state   otid in history        history readable   policy            → result
//	known             (not searched)         -                  any               follow the run; no send
//	none              found, with run id     yes                any               follow that run; no send
//	none              found, no run id yet   yes                any               StillRunning; no send
//	none              not found              no search complete any               StillRunning; no send
//	none              not found              yes                if-not-admitted   resend, same otid
//	none              not found              yes                never             NotAdmitted, forbidden
//
// A 5xx, a 429 or a dropped connection on the send is never taken as proof
// that nothing was stored: the otid is looked for first. Tests pin every row
// against the simulator and count the user messages with the turn's otid.
package continuation
