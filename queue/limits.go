package queue

import (
	"time"

	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/inbound"
)

// Limits of what a producer sends: a Message (checked at enqueue, and
// again when its task reaches a worker) and a Notice.
const (
	// MaxTextBytes bounds Message.Text (64 KiB).
	MaxTextBytes = inbound.MaxTextBytes
	// MaxMetadataEntries, MaxMetadataKeyBytes and MaxMetadataValueBytes
	// bound Message.Metadata; MaxMetadataBytes bounds its keys and values
	// together.
	MaxMetadataEntries    = inbound.MaxMetadataEntries
	MaxMetadataKeyBytes   = inbound.MaxMetadataKeyBytes
	MaxMetadataValueBytes = inbound.MaxMetadataValueBytes
	MaxMetadataBytes      = inbound.MaxMetadataBytes
	// MaxIDBytes bounds agent_id, sender_id, message_id and the two parts
	// of the conversation.
	MaxIDBytes = inbound.MaxIDBytes
	// MaxImages bounds the images of one message.
	MaxImages = inbound.MaxImages
	// MaxImageURLBytes bounds one image URL.
	MaxImageURLBytes = inbound.MaxImageURLBytes
	// MaxImageBytes bounds one image's decoded data (1 MiB).
	MaxImageBytes = inbound.MaxImageBytes
	// MaxImagesBytes bounds the decoded data of all images of a message.
	MaxImagesBytes = inbound.MaxImagesBytes
	// MaxNotifyTextBytes bounds Notice.Text (16 KiB): about four Telegram
	// messages of 4096 characters; a longer text belongs in a document.
	MaxNotifyTextBytes = 16 << 10
	// MaxNotifyKeyBytes bounds Notice.Key.
	MaxNotifyKeyBytes = 128
)

// Defaults and bounds of the Client's and the Worker's settings.
const (
	// DefaultMaxRetry is how many times a failed turn is retried before it
	// fails for good.
	DefaultMaxRetry = 25
	// DefaultRetention is how long a finished task (and its result) is kept.
	DefaultRetention = 24 * time.Hour
	// DefaultStreamTTL is how long a reply stream keeps its events
	// (RepliesOptions.StreamTTL): the journal's default retention
	// (JournalOptions.Retention), so that a turn's events go with its record.
	DefaultStreamTTL = 7 * 24 * time.Hour
	// DefaultMaxReplyBytes bounds the progress text one attempt of a turn
	// writes to its reply stream (WorkerConfig.MaxReplyBytes).
	DefaultMaxReplyBytes = 4 << 20
	// DefaultTakeoverAfter is WorkerConfig.Takeover.After's default.
	DefaultTakeoverAfter = 5 * time.Second
	// MaxApprovalTimeout bounds WorkerConfig.Approvals.Timeout (366 days).
	MaxApprovalTimeout = 366 * 24 * time.Hour
	// MaxLookupCandidates bounds AmbiguousError.Candidates.
	MaxLookupCandidates = 10
	// MaxServerRetryAfter caps the wait a refusal's Retry-After asks for
	// (continuation.Refused: a deploy's 503, Letta's API rate limit). A
	// longer one is reported (in the attempt's error and a warning), not
	// obeyed.
	MaxServerRetryAfter = attempt.MaxServerRetryAfter
	// MaxToolReturnBytes is the most of a tool's return that an event
	// carries; Emit cuts longer returns (at a rune boundary) and sets
	// Truncated.
	MaxToolReturnBytes = attempt.MaxToolReturnBytes
)
