package agentclient

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
)

// Refusal is what a 429, a 402 or a 503 answer to a request means, in the
// words Letta Cloud uses today (WIRE.md, "Errors Letta Cloud returns
// today"). They are told apart by the body's error code and text, never by
// the status alone: a 429 may be Letta's own API rate limit (nothing was
// stored), the model provider's rate limit (the run may have started), or
// a quota or credits limit that waiting does not lift.
type Refusal int

const (
	// RefusalNone: none of the answers below.
	RefusalNone Refusal = iota
	// RefusalDeploy: 503 with errorCode "cloud_api_shutting_down" and
	// "admitted": false, Letta Cloud's answer while it deploys. The server
	// says it stored nothing: send again, same otid, after Retry-After.
	RefusalDeploy
	// RefusalRateLimit: 429 for Letta's own API rate limit (not the
	// model's, not a quota). The request was refused before anything was
	// stored: send again, same otid, after Retry-After.
	RefusalRateLimit
	// RefusalModelRateLimit: 429 with the LLM error type "llm_rate_limit"
	// (usually without Retry-After). The run may have started: look for
	// the otid, back off, and try again.
	RefusalModelRateLimit
	// RefusalQuota: 429 or 402 naming a limit of the account
	// (agents-limit-exceeded, exceeded-quota, not-enough-credits,
	// …-usage-exceeded, insufficient credits). Retrying cannot help: the
	// turn ends, naming the cause (QuotaCause).
	RefusalQuota
)

func (r Refusal) String() string {
	switch r {
	case RefusalDeploy:
		return "deploy"
	case RefusalRateLimit:
		return "rate_limit"
	case RefusalModelRateLimit:
		return "model_rate_limit"
	case RefusalQuota:
		return "quota"
	}
	return "none"
}

// CodeShuttingDown is Letta Cloud's errorCode on the 503 it answers while
// it deploys.
const CodeShuttingDown = "cloud_api_shutting_down"

// usageExceeded finds a "<something>-usage-exceeded" code in a text.
var usageExceeded = regexp.MustCompile(`([a-z0-9]+(?:-[a-z0-9]+)*)-usage-exceeded`)

// quotaCause returns the limit an error text (code and detail, lower
// case) names, in the user's words, or "".
func quotaCause(text string) string {
	switch {
	case strings.Contains(text, "not-enough-credits") || strings.Contains(text, "insufficient_credits") ||
		strings.Contains(text, "insufficient credits") || strings.Contains(text, "not enough credits"):
		return "the Letta account is out of credits"
	case strings.Contains(text, "agents-limit-exceeded"):
		return "the Letta account has reached its limit on the number of agents"
	case strings.Contains(text, "exceeded-quota"):
		return "the Letta account has used up its quota"
	}
	if m := usageExceeded.FindStringSubmatch(text); m != nil {
		return "the Letta account has used up its " + strings.ReplaceAll(m[1], "-", " ") + " usage"
	}
	return ""
}

// Refusal says what a 429, 402 or 503 meant (RefusalNone for anything else).
func (e *Error) Refusal() Refusal {
	switch e.StatusCode {
	case http.StatusServiceUnavailable:
		if e.NotAdmitted && strings.EqualFold(e.Code, CodeShuttingDown) {
			return RefusalDeploy
		}
	case http.StatusPaymentRequired:
		return RefusalQuota
	case http.StatusTooManyRequests:
		text := strings.ToLower(e.Code + " " + e.Detail)
		switch {
		case quotaCause(text) != "":
			return RefusalQuota
		case strings.Contains(text, "llm_rate_limit"):
			return RefusalModelRateLimit
		}
		return RefusalRateLimit
	}
	return RefusalNone
}

// RefusalOf returns the Refusal of the *Error in err's chain.
func RefusalOf(err error) Refusal {
	var ae *Error
	if errors.As(err, &ae) {
		return ae.Refusal()
	}
	return RefusalNone
}

// ServerSaidNotAdmitted reports an answer by which the server itself says
// it stored nothing of a send (RefusalDeploy, RefusalRateLimit): the same
// message may be sent again, with the same otid, after Retry-After,
// without looking for it first.
func ServerSaidNotAdmitted(err error) bool {
	r := RefusalOf(err)
	return r == RefusalDeploy || r == RefusalRateLimit
}

// QuotaCause names, in the user's words, the account limit a RefusalQuota
// error hit ("the Letta account is out of credits"), or "" for any other
// error.
func QuotaCause(err error) string {
	var ae *Error
	if !errors.As(err, &ae) || ae.Refusal() != RefusalQuota {
		return ""
	}
	if c := quotaCause(strings.ToLower(ae.Code + " " + ae.Detail)); c != "" {
		return c
	}
	return "the Letta account is out of credits" // a 402 that names nothing else
}
