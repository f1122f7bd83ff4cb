// Package httpapi holds lettaq's HTTP endpoints over a queue.Client, for a
// producer that takes messages over HTTP (lettaq's own worker mounts them):
// mount EnqueueHandler at POST /enqueue, CancelHandler at POST /cancel and
// NotifyHandler at POST /notify. Each takes JSON only (a browser cannot
// send it across sites without asking first), refuses what is wrong with a
// JSON error naming the field, and answers as its doc says.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// MaxBodyBytes bounds the payload EnqueueHandler takes, decoded
// (payloadBytes): the text, the images' base64 data, and room for the
// rest. The same message is accepted however its producer escapes its
// JSON.
const MaxBodyBytes = queue.MaxTextBytes + queue.MaxImagesBytes/3*4 + 64<<10

// maxRawBodyBytes bounds the body EnqueueHandler reads, before it is
// decoded: a payload within MaxBodyBytes written with every character of
// its text and the room escaped (\u0001, 6 bytes for 1) and every
// character of its base64 data escaped too ("\/"), as no producer writes
// it.
const maxRawBodyBytes = 6*(queue.MaxTextBytes+64<<10) + 2*(queue.MaxImagesBytes/3*4)

// payloadFields are the keys a payload may hold.
var payloadFields = codec.FieldsOf(reflect.TypeFor[queue.Payload]())

// decodePayload parses body, one JSON value, as a Payload; the error is a
// *queue.ValidationError naming the field (as queue.DecodePayload's).
func decodePayload(body []byte) (queue.Payload, error) {
	p, err := payloadcheck.Decode(body, true, payloadFields, func(p *queue.Payload) *record.Conversation { return &p.Conversation })
	return p, validationError(err)
}

// validationError turns a *payloadcheck.Fault into a
// *queue.ValidationError (nil stays nil).
func validationError(err error) error {
	var f *payloadcheck.Fault
	if errors.As(err, &f) {
		return &queue.ValidationError{Field: f.Field, Problem: f.Problem}
	}
	return err
}

// invalid returns a *queue.ValidationError.
func invalid(field, format string, args ...any) error {
	return validationError(payloadcheck.Invalid(field, format, args...))
}

// payloadBytes is the size of p's strings, decoded (base64 data without its
// line breaks): what MaxBodyBytes bounds.
func payloadBytes(p queue.Payload) int {
	n := len(p.AgentID) + len(p.Text) + len(p.SenderID) + len(p.Conversation.Integration) + len(p.Conversation.ChatID) +
		len(p.MessageID) + len(p.Otid) + len(p.LettaConversationID)
	for k, v := range p.Metadata {
		n += len(k) + len(v)
	}
	for _, im := range p.Images {
		n += len(im.URL) + len(im.MediaType) + payloadcheck.Base64Len(im.Data)
	}
	return n
}

// EnqueueHandler returns the handler of POST /enqueue: it enqueues the
// payload POSTed as JSON (the queue.Payload format; "v" may be omitted)
// with c.Enqueue, and answers
//
//	202 {"task_id": "…", "duplicate": false, "queue": "lettaq", "otid": "…"}
//	400 {"error": "…", "field": "text"}        invalid payload
//	409 {"error": "…", "field": "message_id"}  the message id was enqueued before with another text
//	400 {"error": "…"}                         body unreadable (e.g. too slow)
//	405, 413                                   wrong method, payload too large (decoded; see MaxBodyBytes)
//	415 {"error": "…"}                         Content-Type is not application/json
//	500 {"error": "…"}                         Redis trouble: try again
//
// A body with "answer" is the answer to an approval request (see
// answerBody): same answers, and 404 when the request is unknown.
func EnqueueHandler(c *queue.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readJSONPost(w, r, maxRawBodyBytes)
		if !ok {
			return
		}
		if answer(c, w, r, body) {
			return
		}
		p, err := decodePayload(body)
		if ve, ok := queue.IsValidationError(err); ok {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
			return
		}
		if n := payloadBytes(p); n > MaxBodyBytes {
			httpJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("the payload holds %d bytes once decoded, more than %d", n, MaxBodyBytes)})
			return
		}
		if p.V != 0 && p.V != queue.PayloadVersion {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("unknown payload version %d", p.V), "field": "v"})
			return
		}
		res, err := c.Enqueue(r.Context(), p.Message())
		if ve, ok := queue.IsValidationError(err); ok {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
			return
		}
		var conflict *queue.MessageIDConflictError
		if errors.As(err, &conflict) {
			httpJSON(w, http.StatusConflict, map[string]string{"error": conflict.Error(), "field": "message_id"})
			return
		}
		if err != nil {
			httpJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		httpJSON(w, http.StatusAccepted, res)
	})
}

// readJSONPost reads the body of a POST of application/json of at most
// limit bytes; when it is not one, it answers (405, 415, 413 or 400, with
// a JSON error naming what was wrong) and ok is false.
func readJSONPost(w http.ResponseWriter, r *http.Request, limit int64) (body []byte, ok bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		httpJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
		return nil, false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		// A browser sends text/plain, form and multipart bodies across sites
		// without asking first (no CORS preflight); application/json it does not.
		w.Header().Set("Accept", "application/json")
		httpJSON(w, http.StatusUnsupportedMediaType, map[string]string{
			"error": "Content-Type must be application/json, not " + strconv.Quote(r.Header.Get("Content-Type"))})
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		httpJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("body larger than %d bytes", limit)})
		return nil, false
	case err != nil: // e.g. the listener's body timeout
		httpJSON(w, http.StatusBadRequest, map[string]string{"error": "body unreadable: " + err.Error()})
		return nil, false
	}
	return body, true
}

// httpJSON writes v as JSON with status.
func httpJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
