package queue

import (
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/journal"
)

// ApprovalClient is approvalClient for the tests in package queue_test,
// which drive queue/httpapi's handlers over a pending approval (a package
// that imports queue cannot be tested from inside it).
var ApprovalClient = approvalClient

// The payload's decoding and images as the tests of package queue reach
// them (queue/internal/inbound holds them).
var (
	decodePayloadJSON = inbound.DecodeJSON
	lettaImages       = inbound.LettaImages
	otidNamespace     = inbound.OtidNamespace
)

// The journal's live intents and a chat's thread hash, as the tests of
// package queue reach them (queue/internal/journal, queue/internal/attempt).
var (
	liveIntents = journal.LiveIntents
	threadHash  = attempt.ThreadHash
)
