package inbound

import "github.com/lettaq/lettaq/queue/internal/payloadcheck"

// Limits of a Message (checked at enqueue, and again when its task reaches
// a worker).
const (
	// MaxTextBytes bounds Message.Text (64 KiB).
	MaxTextBytes = 64 << 10
	// MaxMetadataEntries, MaxMetadataKeyBytes and MaxMetadataValueBytes
	// bound Message.Metadata; MaxMetadataBytes bounds its keys and values
	// together.
	MaxMetadataEntries    = 32
	MaxMetadataKeyBytes   = 64
	MaxMetadataValueBytes = 1024
	MaxMetadataBytes      = 4 << 10
	// MaxIDBytes bounds agent_id, sender_id, message_id and the two parts
	// of the conversation.
	MaxIDBytes = payloadcheck.MaxIDBytes
	// MaxImages bounds the images of one message.
	MaxImages = 4
	// MaxImageURLBytes bounds one image URL.
	MaxImageURLBytes = 2048
	// MaxImageBytes bounds one image's decoded data (1 MiB).
	MaxImageBytes = 1 << 20
	// MaxImagesBytes bounds the decoded data of all images of a message.
	MaxImagesBytes = 2 << 20
)

// maxTaskIDBytes: a derived task id longer than this is hashed.
const maxTaskIDBytes = 200
