package record

import "time"

// ApprovalRecord is what the journal keeps of an approval (TurnRecord.Approval).
type ApprovalRecord struct {
	RequestTaskID string    `json:"request_task_id"`
	Calls         []string  `json:"calls,omitempty"` // "name (call id)"
	RequestedAt   time.Time `json:"requested_at,omitzero"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	AnsweredBy    string    `json:"answered_by,omitempty"`
	AnsweredAt    time.Time `json:"answered_at,omitzero"`
	// Decision: approved, denied or mixed; Cause: user, expired, moved_on.
	Decision string `json:"decision,omitempty"`
	Cause    string `json:"cause,omitempty"`
	// Waited is the time the request waited for its answer (a human).
	Waited time.Duration `json:"waited_ns,omitempty"`
}

// TurnRecord is what the journal keeps about one turn (one task). Durations
// are stored as integer nanoseconds (fields named …_ns).
type TurnRecord struct {
	TaskID       string       `json:"task_id"`
	Otid         string       `json:"otid,omitempty"`
	AgentID      string       `json:"agent_id,omitempty"`
	RunID        string       `json:"run_id,omitempty"`
	Conversation Conversation `json:"conversation"`
	MessageID    string       `json:"message_id,omitempty"`
	Queue        string       `json:"queue,omitempty"`
	// ThreadMode is the Letta thread the turn used: "conversation",
	// "default", "agent", or "explicit" (named by the payload); and
	// LettaConversationID the conversation ("" for the agent endpoints).
	ThreadMode          string `json:"thread_mode,omitempty"`
	LettaConversationID string `json:"letta_conversation_id,omitempty"`

	EnqueuedAt     time.Time `json:"enqueued_at,omitzero"`
	FirstStartedAt time.Time `json:"first_started_at,omitzero"`
	FinishedAt     time.Time `json:"finished_at,omitzero"`
	// UpdatedAt is set by Save.
	UpdatedAt time.Time `json:"updated_at,omitzero"`

	// QueueWait is from enqueue to the turn's first start; Journal.Save
	// fills it when it is zero and both times are known.
	QueueWait time.Duration `json:"queue_wait_ns,omitempty"`
	Attempts  []Attempt     `json:"attempts,omitempty"`
	// Waits: the times the turn waited without being run (parked: see
	// queue.Ordering), one per thing it waited behind.
	Waits []Wait `json:"waits,omitempty"`

	Outcome    string `json:"outcome,omitempty"`
	Error      string `json:"error,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
	// PartialAnswer: on a turn that failed after the agent had begun its
	// answer (a failure stop reason after some text), that text, cut: not
	// the agent's whole answer, never delivered as one. At most 8 KiB.
	PartialAnswer string `json:"partial_answer,omitempty"`
	// Latency is from enqueue to the end of the turn; Journal.Save fills it
	// when it is zero and both times are known.
	Latency time.Duration `json:"latency_ns,omitempty"`
	// TTFT is from enqueue to the first token of the answer.
	TTFT  time.Duration `json:"ttft_ns,omitempty"`
	Usage *Usage        `json:"usage,omitempty"`
	Tools []ToolSummary `json:"tools,omitempty"`
	// Warnings are anomalies worth an operator's look, e.g. "tool_call_id X
	// seen twice", "tool Y unanswered when run was cancelled".
	Warnings []string `json:"warnings,omitempty"`

	// Approval: on a turn that asked for approval, the request and (once
	// answered or expired) its answer; on an answer turn, what it answered.
	Approval *ApprovalRecord `json:"approval,omitempty"`

	Resends    int    `json:"resends,omitempty"`
	AnsweredBy string `json:"answered_by,omitempty"`
	// Merged lists the message ids merged into this turn.
	Merged []string `json:"merged,omitempty"`
	// Cancel: on a cancelled turn (OutcomeCancelled), who asked, when,
	// and the phase the turn was in when it stopped.
	Cancel *CancelRecord `json:"cancel,omitempty"`
}

// Wait is a time a turn waited without being run: behind the
// turn ahead of it in its conversation's line, or behind its chat's open
// approval request. A wait is one entry however often the turn looked
// again; Until is set when it stopped waiting behind that (it started, or
// waited behind something else).
type Wait struct {
	From   time.Time `json:"from"`
	Until  time.Time `json:"until,omitzero"`
	Behind string    `json:"behind"`
	Reason string    `json:"reason,omitempty"`
}

// Attempt is one execution of a turn by a worker.
type Attempt struct {
	N      int       `json:"n"`
	Worker string    `json:"worker,omitempty"`
	Start  time.Time `json:"start,omitzero"`
	End    time.Time `json:"end,omitzero"`
	// Phases the attempt went through, in order.
	Phases []PhaseMark `json:"phases,omitempty"`
	// TimeoutClock is the clock that ended the attempt (TimeoutClock…), "" if none.
	TimeoutClock string `json:"timeout_clock,omitempty"`
	Polls        int    `json:"polls,omitempty"`
	Resumes      int    `json:"resumes,omitempty"`
	// ResendDecision is one of the Resend… constants, or "".
	ResendDecision string `json:"resend_decision,omitempty"`
	// SentOtid: the intent to send was recorded before the send.
	SentOtid bool   `json:"sent_otid,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Error    string `json:"error,omitempty"`
	// RetryIn is the delay the attempt asked Asynq for before the next
	// one (a retry or a put-back); 0 when it ended the turn.
	RetryIn time.Duration `json:"retry_in_ns,omitempty"`
	// TakenOverFrom: the attempt continued the turn of a worker that died
	// (its instance id; fast takeover, see queue.WorkerConfig.TakeoverAfter).
	TakenOverFrom string `json:"taken_over_from,omitempty"`
}

// Which clock ended an attempt (Attempt.TimeoutClock); "" when none did.
const (
	TimeoutClockConnect  = "connect"
	TimeoutClockStall    = "stall"
	TimeoutClockTotal    = "total"
	TimeoutClockCanceled = "canceled"
)

// Resend decisions (Attempt.ResendDecision); "" when the question never came up.
const (
	ResendNotNeeded = "not_needed"
	ResendSent      = "resent"
	ResendForbidden = "forbidden"
)

// PhaseMark is when an attempt entered a phase.
type PhaseMark struct {
	Phase string    `json:"phase"`
	At    time.Time `json:"at"`
}

// Usage is the token usage of a turn.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens,omitempty"`
	TotalTokens      int `json:"total_tokens,omitempty"`
	StepCount        int `json:"step_count,omitempty"`
}

// ToolSummary is one tool call of a turn.
type ToolSummary struct {
	Name     string        `json:"name"`
	CallID   string        `json:"call_id,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Status   string        `json:"status,omitempty"`
}

// Intent records that an attempt was about to send the turn's message.
// An entry with Refused set withdraws that attempt's latest intent: the
// server answered its send with a definitive refusal (a 4xx such as 409
// "conversation busy"), so nothing was stored.
type Intent struct {
	TaskID  string    `json:"task_id"`
	Otid    string    `json:"otid"`
	Attempt int       `json:"attempt"`
	Worker  string    `json:"worker,omitempty"`
	At      time.Time `json:"at"`
	Refused bool      `json:"refused,omitempty"`
}
