package queue

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
)

// contentHash is the sha256 (hex) of what a message says: its text and its images. Two
// deliveries of one message have the same.
func contentHash(m Message) string {
	h := sha256.New()
	h.Write([]byte(m.Text))
	for _, im := range m.Images {
		h.Write([]byte{0})
		h.Write([]byte(im.URL))
		h.Write([]byte{0})
		h.Write([]byte(im.MediaType))
		h.Write([]byte{0})
		h.Write([]byte(im.Data))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// existingTask judges the task that holds id when m's enqueue (payload b)
// found it taken. An enqueue whose reply was lost after it ran, sent again by
// go-redis, conflicts with itself: the task then holds this very call's
// payload (stamped: it carries this call's own enqueue time), and the call is
// not a duplicate. A task holding a message with another content is a
// *MessageIDConflictError; the same content is a duplicate. A task that cannot
// be read (gone meanwhile, Redis trouble, a payload of another version) is
// taken as a duplicate, as every one was before contents were compared.
func (c *Client) existingTask(m Message, id string, b []byte, stamped bool) (duplicate bool, err error) {
	info, err := c.insp.GetTaskInfo(c.shards.queueOf(id), id)
	if err != nil {
		return true, nil
	}
	if stamped && bytes.Equal(info.Payload, b) {
		return false, nil
	}
	first, err := DecodePayload(info.Payload)
	if err != nil {
		return true, nil
	}
	if a, h := contentHash(first), contentHash(m); a != h {
		return false, &MessageIDConflictError{MessageID: m.MessageID, TaskID: id, EnqueuedHash: a, NewHash: h}
	}
	return true, nil
}
