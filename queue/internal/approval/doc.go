// Package approval is the human in the loop (WIRE.md "Approvals"): the pending approval
// requests, their answers, the approval's journal record and the expiry.
//
// A turn whose run stops with requires_approval records a Pending (every pending tool
// call, the run, the thread) under the turn's task id (Turn.Ask), before its
// approval_required event is written, and schedules its expiry. At Letta the thread now
// refuses every new message until the calls are answered.
//
// The answer is a turn of its own (an Answer in the message): queue's Client checks that it
// answers every pending call, and enqueues it with the task id AnswerTaskID(request) — a
// second press of the same button is the same task — at the front of the conversation's
// line. An answer turn that gives up before its answer reached Letta leaves the request
// pending (answerable again, with a new expiry); the next answer's task id is
// AnswerTaskIDAfter the count of failed answers. It sends Letta's approval message
// (Turn.Gate gives it) and then streams, continues and delivers like a message turn: the run
// may answer, or ask for another approval. When it ends, Turn.Ended records on the request
// how (answered, or the failed answer), with the wait on the requesting turn's record, and
// wakes the messages that waited for the answer.
//
// Keys (prefix as the reply streams'; store.Approvals writes them):
//
//	<prefix>approval:req:<task_id>               the Pending, JSON
//	<prefix>approval:otid:<otid>                 task id of the requesting turn
//	<prefix>approval:pending:<agent>:<scope>      task id of the thread's unanswered request
//
// The scope is the Letta thread a request blocks (Part.Scope): the chat's own conversation
// ("chat:<integration>:<chat_id>", thread mode conversation), a conversation the payload
// names ("conv:<id>"), or the agent's default thread, which every chat of the agent shares
// ("agent", thread modes default and agent): a message of any chat of the agent then meets
// it.
//
// A message that reaches the head of its line while its chat has an unanswered request
// meets Turn.Gate, which follows the Policy: it waits (the attempt parks), the request is
// denied first, or the message fails. An unanswered request is denied when it expires: the
// expiry is the answer turn itself, scheduled at that time with the reason, and replaced by
// an answer that comes first.
//
// What the part needs of the worker comes at construction (Config: the answers the worker
// enqueues itself, other turns' journal records, the wake-up of waiting turns); what it
// needs of its attempt, through Attempt (the run's id, the approval on the attempt's
// record, a Redis failure). The attempt applies the Gate's verdict itself.
package approval
