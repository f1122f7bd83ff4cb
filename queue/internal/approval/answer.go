package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"

	"github.com/lettaq/lettaq/internal/hashtag"
	"github.com/lettaq/lettaq/queue/record"
)

// maxAnswerTaskID bounds an answer's task id: a longer one is hashed.
const maxAnswerTaskID = 200

// Summary is what the decisions say together: "approved", "denied" or "mixed".
func Summary(ds []record.ApprovalVerdict) string {
	yes, no := 0, 0
	for _, d := range ds {
		if d.Approve {
			yes++
		} else {
			no++
		}
	}
	switch {
	case no == 0:
		return "approved"
	case yes == 0:
		return "denied"
	}
	return "mixed"
}

// ErrNoRequest is returned (wrapped) when no approval request is known by the given task
// id or otid (queue's ErrNoApproval).
var ErrNoRequest = errors.New("queue: no approval request")

// AnswerTaskID is the task id of the answer to the request of task requestTaskID:
// "answer:" and that id (hashed when long, keeping the request's shard: see keptShard),
// so that the same answer sent twice is one task.
func AnswerTaskID(requestTaskID string) string {
	id := "answer:" + requestTaskID
	if len(id) > maxAnswerTaskID {
		sum := sha256.Sum256([]byte(requestTaskID))
		return "answer:" + keptShard(requestTaskID) + "h:" + hex.EncodeToString(sum[:])
	}
	return id
}

// keptShard is "{<tag>}:" for a request whose id names its shard by a hash tag
// (queue/shard: "turn:{lettaq-2-3}:…"), else "": an answer whose id is hashed stays in the
// request's shard, whose queue and keys its id names.
func keptShard(requestTaskID string) string {
	if tag := hashtag.Of(requestTaskID); tag != "" {
		return "{" + tag + "}:"
	}
	return ""
}

// AnswerTaskIDAfter is the task id of the answer to the request of task requestTaskID
// after failed answer turns (Pending.FailedAnswers): AnswerTaskID when failed is 0, else
// "answer#<failed+1>:" and the request's id (hashed when long). An AnswerTaskID never has
// '#' after "answer".
func AnswerTaskIDAfter(requestTaskID string, failed int) string {
	if failed <= 0 {
		return AnswerTaskID(requestTaskID)
	}
	pre := "answer#" + strconv.Itoa(failed+1) + ":"
	if id := pre + requestTaskID; len(id) <= maxAnswerTaskID {
		return id
	}
	sum := sha256.Sum256([]byte(requestTaskID))
	return pre + keptShard(requestTaskID) + "h:" + hex.EncodeToString(sum[:])
}
