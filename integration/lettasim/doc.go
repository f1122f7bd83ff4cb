// Package lettasim is a Letta-compatible server in a box, for tests, benchmarks and a
// worker's dev mode. Like net/http/httptest, it is a real HTTP server on loopback: point any
// Letta client at Server.URL.
//
// It speaks the slice of Letta's REST API that a chat worker uses, with the behaviour of Letta's
// server and the JSON shapes of Letta's OpenAPI document (a copy lives in the repository's
// testdata/letta; the tests validate every object it emits against that schema). It
// deliberately imports nothing else from lettaq: it encodes what Letta does, not what our
// client expects.
//
// # Starting it
//
//	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001}) // a "3 minute" turn takes 180ms
//	defer srv.Close()
//	agent := srv.CreateAgent("support-bot", nil) // "agent-<uuid4>", default script
//	// base URL for the client under test: srv.URL (http://127.0.0.1:<port>)
//
// New returns the bare http.Handler (a *Sim) to mount elsewhere; Close it to end the runs in
// flight. Config.APIKey turns on bearer-token checks, Config.PingInterval sets the keep-alive
// interval (20s by default, like Letta), Config.AutoCreateAgents accepts any well-formed agent id (for load tests; a real server answers 404),
// Config.OneRunPerAgent answers 409 "conversation busy" to a send while the agent is running.
//
// Endpoints (also under the /latest/ alias): POST /v1/agents/{id}/messages/stream;
// POST /v1/agents/{id}/messages (streaming true or false, with Letta's User-Agent trap);
// POST /v1/agents/{id}/messages/async; POST /v1/agents/{id}/messages/cancel;
// GET /v1/agents/{id}/messages; GET /v1/runs/{run_id}; GET /v1/runs/{run_id}/messages;
// POST /v1/runs/{run_id}/stream (resume); GET /v1/runs/ (filters agent_id, statuses, active,
// background, stop_reason, conversation_id); GET and POST /v1/agents/ (GET filters by name);
// GET /v1/agents/{id}; GET /v1/health/; and the conversation endpoints below.
//
// Ids have Letta's shapes: agent-<uuid4>, conv-<uuid4>, run-<uuid4>, message-<uuid4>. A path
// parameter that does not match the schema's pattern answers 422 (string_pattern_mismatch), as
// a real server does: "agent-demo" is refused, not "not found". AddAgent panics on such an id.
//
// # Conversations
//
// POST /v1/conversations/?agent_id= (body CreateConversation; summary kept), GET
// /v1/conversations/ (agent_id, limit, after, order, order_by, summary_search: a
// case-insensitive substring of the summary), GET /v1/conversations/{id}; and per thread (a
// conv-<uuid4>, "default" with agent_id in the body or query, or an agent id: the agent's
// default thread, whose messages are the agent's history): POST …/messages (send: streaming
// true by default, background, include_pings, stream_tokens, max_steps), POST …/stream
// (resume), GET …/messages (history, cursors as the agent list), POST …/cancel.
//
// The conversation endpoints behave as WIRE.md says a Letta server does; the agent endpoints
// keep no lock and map no otids, so tests can show the difference:
//
//   - Lock: one run at a time per thread, held from the send until the run ends or
//     Config.LockTTL (300s, scaled) has passed since it was taken, whichever is first; never
//     extended. A send while locked answers 409 {"detail": "CONFLICT: Cannot send a new message:
//     Another request (run_id=run-…) is currently being processed for this conversation. Please
//     wait for it to complete.", "run_id": "run-…"}, or with Config.HostedBusy (or the send's
//     [[sim busy_form=hosted]]) the hosted form {"error": "Conversation … is busy with another
//     active run."}. Sim.Conflicts counts them.
//   - Background map: a background send maps each of its otids, and a hash of all of them, to
//     its run for Config.OtidMapTTL (3h, scaled). A send that matches answers 200 with that
//     run's stream replayed from the start: no new run, no second stored message. A background
//     send that loses the race to a holder sent with the same otid waits Config.SecondChance
//     (1.75s, scaled) for its otids to be mapped or the lock to free before the 409
//     (Config.RegisterLag delays the mapping, to make that race happen); any other send to a
//     locked thread gets the 409 at once. Foreground sends map nothing: a same-otid resend gets
//     409 while the first run holds the lock and starts a new run after it.
//   - Resume: by run_id; else by otid through the map (404 "No run found for otid=…"); else the
//     newest active run of the thread (400 "No active runs found"); 400 for a foreground run;
//     410 for a run created more than Config.ResumeMaxAge ago.
//   - Trimming: a background run's stream keeps about Config.MaxStreamChunks chunks (10,000);
//     a resume from 0 of a longer run starts at the oldest chunk kept.
//   - Cancel: 409 NO_ACTIVE_RUNS_TO_CANCEL when nothing runs; a cancelled run frees the lock.
//
// From Go: CreateConversation, Conversations, ConversationUserMessages (per thread, in order,
// with otids and run ids), ConversationHistory, ConversationRuns, AllRuns (RunInfo carries
// ConversationID, Started and Ended: overlap of turns is measurable), Conflicts.
//
// # Approvals
//
// An ApprovalRequest step (or the approval= directive) ends its run with an
// approval_request_message naming one or more tool calls (Step.Calls: parallel calls of one
// model step) and stop reason requires_approval. Its thread then waits: a conversation, or the
// agent's default thread, which "default" and the agent endpoints share. Until it is answered:
//
//   - A user message to the thread answers 409 {"detail": "CONFLICT: Cannot send a new message:
//     The agent is waiting for approval on a tool call. …"} and nothing is stored (the
//     PendingApproval fault answers the same without a pending request).
//   - The answer is a message of its own, sent like any other (same endpoints, streaming,
//     background otid map and replay, its own otid and run): {"type": "approval", "otid": …,
//     "approvals": [{"type": "approval", "tool_call_id": …, "approve": true|false, "reason": …}
//     | {"type": "tool", "tool_call_id": …, "tool_return": …, "status": "success"|"error"}]},
//     or the ToolReturnCreate form {"type": "tool_return", "tool_returns": […]}, or the
//     deprecated {"approve": …, "approval_request_id": …} for a single call. It must be the only
//     message of its request (422) and answer exactly the pending calls, once each: else 400
//     "Invalid tool call IDs. Expected '['call_…', …]', but received '[…]'." With nothing
//     pending: 400 "Cannot process approval response: No tool call is currently awaiting
//     approval. …". A refused answer stores nothing and leaves the request pending.
//   - Its run streams (and stores) the approval_response_message, then a tool_return_message
//     per call in the request's order: the simulated result of an approved call, a client's
//     own return, or status error "Error: request to call tool denied. User reason: …" for a
//     denied one. Then the model goes on: if any call was denied, it answers "I did not run
//     <tools>: the request was denied: <reasons>."; else it runs the script's steps after the
//     ApprovalRequest (another ApprovalRequest among them asks again), or, when there are none,
//     answers "Done: <tools> ran.".
//
// From Go: PendingApproval(agent, conversationID), PendingApprovals(agent) (every waiting
// thread of the agent) and WaitPendingApproval give the request (RequestID, RunID,
// ConversationID, Calls with ids, names and arguments); ApprovalMessages(agent) the accepted
// answers (Received.Approvals); CountOtid / WaitOtid count and wait for approval messages as
// for user messages (stored: 1 per turn), SendAttempts counts the sends of an otid, stored or
// refused (an approval sent twice is stored once but sent twice). History's Message has
// ToolCalls and Approvals.
//
// # Images
//
// A user message's content may hold image parts next to text: {"type": "image", "source":
// {"type": "url", "url": …} | {"type": "base64", "media_type": "image/png", "data": …} |
// {"type": "letta", "file_id": …}}. A part that misses a required field is a 422. A base64
// image whose media type is not image/png, jpeg, gif or webp, or whose data is not base64, is
// a 400 naming the field. The server "fetches" each URL by Config.ImageFetch's rule (default:
// an http(s) URL with a host, unless the host is under the reserved .invalid domain; the Sim
// never touches the network): a failure is a 400 "INVALID_ARGUMENT: Failed to fetch image from
// <url>: <why>" (Letta's LettaImageFetchError), and nothing is stored. Accepted images are
// stored and listed back as content parts, counted in Received.Images and Message.Images, and
// the echoed answer mentions them ("you said: look (and 1 image)").
//
// # How a turn runs
//
// A send request is validated (422 on a bad body), then the user message is stored with the
// client's otid (one is minted if absent) and the run_id of the run it starts. The run executes
// its script in its own goroutine, independent of the HTTP request: a client that goes away
// never stops it, only the cancel endpoint (or Close) does. Each stream, the original one or a
// resume, subscribes to the run's log of SSE chunks, so resuming from a seq_id is a replay of
// the log from there. Messages land in the agent's history when their step ends, each with its
// run_id; a model step's reasoning and content share one id and differ in otid; a tool return
// has an id of its own and pairs by tool_call_id.
//
// Streams are framed as Letta frames them: data: <compact JSON>, a first ping carrying run_id,
// the messages, stop_reason, usage_statistics, data: [DONE]; pings after every PingInterval
// without data; seq_id numbering (1, 2, 3, ...) in background streams and null in foreground
// ones; a failing run sends stop_reason then event: error and no [DONE]; a cancelled one sends
// {"message_type": "stop_reason", "stop_reason": "cancelled"} (with spaces) then [DONE].
//
// # Scripts
//
// A Script is the list of Steps a turn emits: Reasoning, ToolCall, ToolReturn, Assistant,
// ApprovalRequest. Each step may wait Delay first (scaled by TimeScale; pings flow meanwhile,
// which is how a turn "thinks"). An empty Assistant text answers "you said: <user text>".
// Script.Tokens (or stream_tokens:true in the request) sends text as deltas sharing one id.
//
//	srv.CreateAgent("researcher", &lettasim.Script{Steps: []lettasim.Step{
//		{Kind: lettasim.Reasoning, Text: "Let me search.", Delay: 3 * time.Minute},
//		{Kind: lettasim.ToolCall, ToolName: "web_search", Arguments: `{"query": "letta"}`},
//		{Kind: lettasim.ToolReturn, Text: "3 results", Delay: 10 * time.Second},
//		{Kind: lettasim.Reasoning, Text: "Found it."},
//		{Kind: lettasim.Assistant, Text: "Here is what I found."},
//	}})
//
// QuickScript, ThinkingScript and ToolScript build common shapes. The default script is one
// reasoning step and one echoing answer.
//
// # Directives
//
// Tests and demos without Go access pick behaviour with a directive anywhere in the user's
// text. Several blocks merge; the echoed answer leaves them out.
//
//	[[sim think=180s tool=web_search disconnect_after=3 stall=60s]] what's new?
//
// Grammar: "[[sim" then space-separated key=value items then "]]". A value is a bare word or
// a double-quoted string (\" and \\ escape); a bare key means key=true. Durations are Go
// durations (250ms, 180s, 1.5m) or plain seconds (3, 0.5), scaled by TimeScale; "forever" where
// noted. Booleans: true/false, 1/0, yes/no, on/off. An unknown key or a bad value answers 422
// with a detail that names it.
//
// Script keys (any of them replaces the agent's script for this turn):
//
//	think=D              delay before the first reasoning step (pings only meanwhile)
//	reasoning="text"     the first reasoning text
//	tool=a,b             call these tools in turn (reasoning+call, return, ...), then answer
//	tool_delay=D         how long each tool runs (delay before each tool return; with approval=,
//	                     how long an approved call runs before the model goes on)
//	tool_status=error    tool returns report status error
//	answer="text"        the final answer (default "you said: <text>")
//	answer_delay=D       delay before the answer
//	tokens               token mode (deltas sharing one id; Script.TokenDelay paces them)
//	approval=a,b         end with one approval request for these tools (stop reason
//	                     requires_approval); once approved, the run of the answer goes on to
//	                     the answer (a denial gets an answer about the denial)
//	then_approval=c,d    after approval= is approved, ask approval again for these tools
//	stop=reason          stop reason after a complete script (default end_turn)
//
// Fault keys (see Fault for what each does):
//
//	admit_delay=D|forever       AdmitDelay
//	status=429|5xx              Status429 / Status5xxBeforeStore (nothing stored)
//	retry_after=D               RetryAfter (the 429's or deploy 503's Retry-After)
//	deploy_503                  Deploy503: 503 {"errorCode": "cloud_api_shutting_down", "admitted": false, …}
//	limit_429=CODE              Status429Code: rate_limit (Letta's API), llm_rate_limit (the model's, no
//	                            Retry-After), or an account limit code (not-enough-credits, exceeded-quota, …)
//	busy_after_store            BusyAfterStore: stores the message, starts the run, answers 409 busy
//	busy                        Busy: 409 "conversation busy" naming a run (nothing stored)
//	busy_form=hosted|detail|newer|nested  the form of this send's 409 on a locked conversation
//	pending_approval            PendingApproval: 409 "waiting for approval on a tool call" (nothing stored)
//	status_after_store=5xx      Status5xxAfterStore (stored, run goes on)
//	drop                        DropBeforeResponse
//	first_byte=D|forever        FirstByteDelay
//	stall=D|forever             StallFor, after stall_after=K events (default 0: right after headers)
//	disconnect_after=K          DisconnectAfter
//	end=reason                  EndWith, after end_after=N|all steps (default 0), error_type=T
//	exception                   UnhandledException
//	resume=400|410|503          ResumeStatus
//	ignore_starting_after       IgnoreStartingAfter: resumes replay the run's stream from its start
//	slow_list=D fail_list=N     set the agent's ListFault (read endpoints)
//	ignore_after reverse_order  set the agent's ListFault: the message lists ignore the after
//	                            cursor (IgnoreAfter), list each page reversed (ReverseOrder)
//	times=N|always              apply the faults to the first N attempts (default 1)
//
// Directive faults count attempts per otid: a client that retries a turn with the same otid,
// as it must, meets the fault only on its first try (or first N tries), so a transient failure
// stays transient. A request without an otid gets a fresh one, hence the fault every time.
//
// # Faults from Go
//
// SetFault arms a Fault for an agent's next turn (Times turns, or every turn if Persistent);
// it wins over a directive. SetListFault slows or fails the read endpoints (list messages, get
// run, run messages, list runs). The phases, in order:
//
//	AdmitDelay → Status429 / PendingApproval / Busy / Status5xxBeforeStore → [message stored, run started] →
//	Status5xxAfterStore / DropBeforeResponse → FirstByteDelay → stream (StallAfter/StallFor,
//	DisconnectAfter) ; the run: EndWith after EndAfter steps, UnhandledException ;
//	resumes of the run: ResumeStatus, IgnoreStartingAfter
//
// Connection faults (stall, disconnect, first byte) never touch the run: it goes on and its
// messages land in history, which is what a client's continuation logic must find. A
// disconnect panics with http.ErrAbortHandler, so mount the Sim behind a server that
// recovers it (any net/http server does), not an httptest.ResponseRecorder.
//
// # Assertions
//
//	srv.CountOtid(otid)            stored user (or approval) messages with this otid: 1 per turn, always
//	srv.WaitOtid(ctx, otid)        wait until it is stored (returns its RunID)
//	srv.WaitOtids(ctx, n)          wait until n distinct otids are stored (a load's progress)
//	srv.WaitRunDone(ctx, runID)    wait for a run's end; srv.WaitIdle(ctx) for all of them
//	srv.UserMessages(agent)        Otid, Text, RunID, SenderID, At, Images of each received message
//	srv.ApprovalMessages(agent)    each accepted approval message, with its answers
//	srv.PendingApproval(agent, c)  the approval request a thread waits on (tool call ids, names)
//	srv.PendingApprovals(agent)    every waiting thread of the agent
//	srv.SendAttempts(otid)         send requests carrying otid, stored, replayed or refused
//	srv.Runs(agent), srv.Run(id)   ID, Status, StopReason, Background, Otid, times, TTFT
//	srv.History(agent)             every stored message
//	srv.Requests()                 per-endpoint requests, response bytes and errors
//	srv.SeedHistory(agent, n)      n old messages (100,000 in ~0.1s) to make lists realistic
//
// List cursors are indexed (message id → position), so after=<id> costs the same on an agent
// with 100,000 messages as on an empty one, and GET /v1/runs/{id}/messages?after=<last id>
// returns only what is new. Cursors follow the sort order, as Letta documents: with order=desc,
// after=X means older than X. Pages never split a message id (a page counts stored rows, and a
// reasoning+answer row lists as two messages).
package lettasim
