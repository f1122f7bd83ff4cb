package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is a failed call to the Letta API: an HTTP status other than 2xx, or
// a transport failure (StatusCode 0). It never contains the API key.
type Error struct {
	// Op names the call ("send message", "get run", …).
	Op string
	// Method and Path of the request (no host, no query secrets).
	Method, Path string
	// StatusCode is the HTTP status, 0 for a transport failure.
	StatusCode int
	// Detail is Letta's error text (the "detail" field, or the LLM error's
	// message), truncated to 2 KiB.
	Detail string
	// RetryAfter is the server's Retry-After, 0 when absent.
	RetryAfter time.Duration
	// RunID is set on 409 "conversation busy" answers that name the run.
	RunID string
	// Code is the body's error code: its "errorCode" or "code" field, or
	// the type of an LLM error ("llm_rate_limit"), "" when it has none.
	Code string
	// NotAdmitted: the body said "admitted": false, the server's own word
	// that it stored nothing of the request (Letta Cloud's deploy 503).
	NotAdmitted bool
	// Err is the transport error, when StatusCode is 0.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("letta: ")
	b.WriteString(e.Op)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": %s %s: HTTP %d", e.Method, e.Path, e.StatusCode)
		if e.Detail != "" {
			b.WriteString(": ")
			b.WriteString(e.Detail)
		}
		if e.RetryAfter > 0 {
			fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
		}
	} else if e.Err != nil {
		fmt.Fprintf(&b, ": %s %s: %v", e.Method, e.Path, e.Err)
	}
	return b.String()
}

// Unwrap returns the transport error.
func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same request may succeed later: 429 (but
// a quota's or credits', see RefusalQuota), 5xx,
// 409 busy (IsBusy), other 409s with Retry-After, and transport failures.
// 400, 401, 402, 403, 404, 410, 422, 409 pending approval and other 409s
// without Retry-After are permanent.
func (e *Error) Retryable() bool {
	switch {
	case e.StatusCode == 0:
		return !errors.Is(e.Err, context.Canceled)
	case e.StatusCode == http.StatusTooManyRequests:
		return e.Refusal() != RefusalQuota // a quota or credits 429 is not fixed by waiting
	case e.StatusCode == http.StatusConflict:
		switch e.Conflict() {
		case ConflictBusy:
			return true // the lock frees when its run ends
		case ConflictPendingApproval:
			return false // until the approval is answered
		}
		return e.RetryAfter > 0
	case e.StatusCode >= 500:
		return true
	case e.StatusCode == http.StatusRequestTimeout:
		return true
	default:
		return false
	}
}

// Class is what a caller (the queue) should do about an error.
type Class int

const (
	// Retryable: try again later (with backoff, honouring Retry-After).
	Retryable Class = iota
	// Permanent: retrying cannot help; report and stop.
	Permanent
	// Canceled: the caller's own context ended.
	Canceled
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Permanent:
		return "permanent"
	default:
		return "canceled"
	}
}

// Classify sorts any error from this package. Stream errors (clocks, cut
// streams) are retryable: the turn may still be going on at the server.
// Protocol errors (a limit passed, a body that is not SSE) are permanent.
func Classify(err error) Class {
	var ae *Error
	var se *StreamError
	switch {
	case err == nil:
		return Retryable
	case IsProtocolError(err):
		return Permanent
	case errors.As(err, new(*InvalidIDError)):
		return Permanent
	case errors.As(err, &se):
		if se.Clock == ClockCanceled {
			return Canceled
		}
		return Retryable
	case errors.As(err, &ae):
		if ae.StatusCode == 0 && (errors.Is(ae.Err, context.Canceled)) {
			return Canceled
		}
		if ae.Retryable() {
			return Retryable
		}
		return Permanent
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return Retryable
}

// IsNotFound reports a 404 (agent, run or cursor not found).
func IsNotFound(err error) bool { return StatusCode(err) == http.StatusNotFound }

// StatusCode returns the HTTP status of an *Error in err's chain, or 0.
func StatusCode(err error) int {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// RetryAfter returns the server's Retry-After carried by err, or 0.
func RetryAfter(err error) time.Duration {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.RetryAfter
	}
	return 0
}

// Clock names the stream clock that ended a read.
type Clock string

const (
	// ClockConnect: no first byte of the body within the connect timeout.
	ClockConnect Clock = "connect"
	// ClockStall: no bytes at all (pings count) within the stall timeout.
	ClockStall Clock = "stall"
	// ClockTotal: the read went on longer than the total cap.
	ClockTotal Clock = "total"
	// ClockCanceled: the caller's context ended (or its deadline passed).
	ClockCanceled Clock = "canceled"
)

// StreamError ends a stream that did not reach its stop_reason: a clock
// fired, the caller cancelled, the connection was cut, or the server sent an
// in-band error before any stop reason. State holds all the stream learned.
type StreamError struct {
	// Clock is the clock that fired, "" when the stream was cut or failed.
	Clock Clock
	// InBand is the in-band error event that ended the stream, if any.
	InBand *ErrorMessage
	// State is a snapshot of the stream state when the read ended.
	State Snapshot
	// Err is the underlying cause (read error, context error).
	Err error
}

func (e *StreamError) Error() string {
	var b strings.Builder
	b.WriteString("letta stream: ")
	switch {
	case e.Clock == ClockCanceled:
		b.WriteString("canceled")
	case e.Clock != "":
		fmt.Fprintf(&b, "%s timeout", e.Clock)
	case e.InBand != nil:
		fmt.Fprintf(&b, "server error %s", errorText(e.InBand))
	default:
		b.WriteString("cut before stop_reason")
	}
	if e.State.RunID != "" {
		fmt.Fprintf(&b, " (run %s, %d events)", e.State.RunID, e.State.Events)
	} else {
		fmt.Fprintf(&b, " (no run id, %d events)", e.State.Events)
	}
	if e.Err != nil && e.Clock == "" {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *StreamError) Unwrap() error { return e.Err }

// Timeout reports whether a stream clock (not cancellation) ended the read.
func (e *StreamError) Timeout() bool {
	return e.Clock == ClockConnect || e.Clock == ClockStall || e.Clock == ClockTotal
}

const maxDetail = 2 << 10

// errorBody is what an error body says.
type errorBody struct {
	detail, runID, code string
	notAdmitted         bool
}

// parseErrorBody pulls Letta's message out of an error body: {"detail": …}
// (a string or an object), {"error": …} (a string, an LLM error object
// {"type", "message", "detail"}, or the newer busy form nested as
// {"error": {"error": "…"}}), and Letta Cloud's fields errorCode, code and
// admitted.
func parseErrorBody(body []byte) errorBody {
	var out errorBody
	var v struct {
		Detail    json.RawMessage `json:"detail"`
		Error     json.RawMessage `json:"error"`
		RunID     string          `json:"run_id"`
		ErrorCode string          `json:"errorCode"`
		Code      string          `json:"code"`
		Admitted  *bool           `json:"admitted"`
		Message   string          `json:"message"`
	}
	if json.Unmarshal(body, &v) == nil {
		out.runID = v.RunID
		out.code = v.ErrorCode
		if out.code == "" {
			out.code = v.Code
		}
		out.notAdmitted = v.Admitted != nil && !*v.Admitted
		switch {
		case len(v.Detail) > 0:
			out.detail = rawString(v.Detail)
			var d struct {
				RunID string `json:"run_id"`
				Code  string `json:"code"`
			}
			if json.Unmarshal(v.Detail, &d) == nil {
				if out.runID == "" {
					out.runID = d.RunID
				}
				if out.code == "" {
					out.code = d.Code
				}
			}
		case len(v.Error) > 0:
			var e struct {
				Type, Message, Detail string
				Error                 json.RawMessage
				RunID                 string `json:"run_id"`
			}
			switch {
			case json.Unmarshal(v.Error, &e) == nil && e.Message != "":
				out.detail = strings.TrimSpace(e.Type + ": " + e.Message)
				if out.code == "" {
					out.code = e.Type
				}
			case e.Error != nil && rawString(e.Error) != "":
				out.detail = rawString(e.Error) // {"error": {"error": "…"}}
			default:
				out.detail = rawString(v.Error)
			}
		case v.Message != "":
			out.detail = v.Message
		}
	}
	if out.detail == "" {
		out.detail = strings.TrimSpace(string(body))
	}
	if len(out.detail) > maxDetail {
		out.detail = out.detail[:maxDetail] + "…"
	}
	if len(out.code) > 128 {
		out.code = out.code[:128]
	}
	return out
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(h, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}
