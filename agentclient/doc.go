// Package agentclient is a Letta REST client built to survive bad streams.
//
// It sends one user message per turn with the caller's otid (Letta's
// idempotency key for a turn) and reads the turn's server-sent events, the
// way the server really frames them: `data:` lines, `event: error` with and
// without a message_type, `event: cancelled`, `data: [DONE]`, EOF, CRLF line
// ends and lines split across reads.
//
// # Bounded memory
//
// Every byte from the server is bounded: one SSE line (MaxLineBytes, 8 MiB),
// one event's data lines joined (MaxEventBytes, 16 MiB), the body of every
// non-streaming answer (MaxResponseBytes, 8 MiB) and the text a StreamState
// accumulates (MaxTranscriptBytes, 8 MiB). Passing one, or answering a
// stream with a body that is not text/event-stream, is a *ProtocolError
// naming the violation and the limit. No call follows a redirect: the API
// key never goes to another origin.
//
// # State hoisted outside the read
//
// The caller owns a StreamState and passes it to every read of a turn. The
// reader updates it on every event before handing the event on: run id, last
// seq_id, message ids, the transcript so far (Transcript: reasoning, tool
// calls and returns paired by tool_call_id, assistant text, with token deltas
// joined), stop reason, usage, phase, and the times of the first and last
// byte and content. A read that is cancelled or whose clock fires loses
// nothing: the continuation package picks the turn up from the state.
//
// # Three clocks, one watchdog
//
// Every streaming read (SendStream, ResumeStream) runs under Clocks:
//
//	Connect      no first byte of the body within this time        → StreamError{Clock: "connect"}
//	Stall        no bytes at all for this long (pings count)        → StreamError{Clock: "stall"}
//	Total        the read lasts longer than this (from first byte)  → StreamError{Clock: "total"}
//	ContentIdle  only pings for this long: OnIdle is told the agent is still thinking; never aborts
//	StopGrace    after stop_reason, a body still open this long is closed and the turn is complete
//
// One re-armed timer implements all of them; the read path stores a
// timestamp per chunk and nothing else. A caller's cancellation ends the read
// with Clock "canceled".
//
// # Errors
//
// HTTP failures are *Error (status, Letta's detail text, Retry-After, the run
// id of a 409 busy answer); stream ends without a stop reason are
// *StreamError (the clock, the in-band error, a snapshot of the state);
// protocol violations are *ProtocolError. Classify sorts any error into
// Retryable (429, 5xx, 409 busy, other 409s with Retry-After, transport
// failures, stream errors), Permanent (400, 401, 402, 403, 404, 410, 422,
// 409 pending approval, other 409s without Retry-After, 3xx, protocol
// errors) and Canceled. IsBusy, BusyRunID and IsPendingApproval tell the
// 409s apart by their text, in both forms Letta sends (conflict.go).
//
// # Conversations
//
// SendStream with SendRequest.ConversationID sends to a Letta conversation
// (conv-… or "default"), the locked, deduplicating way to send;
// ResumeConversationStream re-attaches by run id, otid or the newest active
// run; CreateConversation, ListConversations (summary_search),
// GetConversation, ListConversationMessages and CancelConversation cover the
// rest (conversations.go). The API key is sent only
// in the Authorization header and never appears in an error's text.
//
// A 5xx on a send does not prove that the message was not stored; a stream
// error does not mean the run ended. Use package continuation to find out.
package agentclient
