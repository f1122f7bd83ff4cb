package queue

import "github.com/lettaq/lettaq/queue/internal/inbound"

// DecodePayload parses and validates a task payload. On error the returned
// Message holds whatever could be read (a worker uses its Conversation to
// report the error), and the error is a *ValidationError.
func DecodePayload(b []byte) (Message, error) { return inbound.Decode(b) }
