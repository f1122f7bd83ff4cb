package agentclient

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The 429, 402 and 503 answers Letta Cloud gives today (WIRE.md, "Errors
// Letta Cloud returns today"), as a send meets them.
var refusalBodies = []struct {
	name       string
	status     int
	retryAfter string
	body       string
	want       Refusal
	class      Class
	notAdm     bool   // ServerSaidNotAdmitted
	cause      string // QuotaCause
}{
	{"deploy 503", 503, "7", `{"errorCode": "cloud_api_shutting_down", "message": "Letta Cloud is restarting", "admitted": false, "retryable": true}`,
		RefusalDeploy, Retryable, true, ""},
	{"plain 503", 503, "", `{"detail": "Service Unavailable"}`, RefusalNone, Retryable, false, ""},
	{"503 admitted unknown", 503, "", `{"errorCode": "cloud_api_shutting_down"}`, RefusalNone, Retryable, false, ""},
	{"API rate limit", 429, "3", `{"detail": "RATE_LIMIT_EXCEEDED: too many requests"}`, RefusalRateLimit, Retryable, true, ""},
	{"model rate limit", 429, "", `{"error": {"type": "llm_rate_limit", "message": "Rate limited by OpenAI", "detail": "429"}}`,
		RefusalModelRateLimit, Retryable, false, ""},
	{"credits", 429, "", `{"detail": "not-enough-credits: your organization has no credits left"}`, RefusalQuota, Permanent, false,
		"the Letta account is out of credits"},
	{"agents limit, code", 429, "", `{"errorCode": "agents-limit-exceeded", "message": "You have reached your agent limit"}`, RefusalQuota, Permanent, false,
		"the Letta account has reached its limit on the number of agents"},
	{"quota", 429, "", `{"detail": "exceeded-quota"}`, RefusalQuota, Permanent, false, "the Letta account has used up its quota"},
	{"usage", 429, "", `{"error": {"type": "premium-usage-exceeded", "message": "premium model usage exceeded"}}`, RefusalQuota, Permanent, false,
		"the Letta account has used up its premium usage"},
	{"402", 402, "", `{"detail": "INSUFFICIENT_CREDITS: top up"}`, RefusalQuota, Permanent, false, "the Letta account is out of credits"},
	{"402 usage", 402, "", `{"detail": "context-window-usage-exceeded"}`, RefusalQuota, Permanent, false,
		"the Letta account has used up its context window usage"},
}

func TestRefusalClassification(t *testing.T) {
	for _, tc := range refusalBodies {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			err := c.SendStream(context.Background(), SendRequest{AgentID: testAgent, ConversationID: testConv, Text: "x", Otid: testOtid},
				NewStreamState(), StreamOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			if got := RefusalOf(err); got != tc.want {
				t.Errorf("RefusalOf %v, want %v (%v)", got, tc.want, err)
			}
			if got := Classify(err); got != tc.class {
				t.Errorf("Classify %v, want %v", got, tc.class)
			}
			if got := ServerSaidNotAdmitted(err); got != tc.notAdm {
				t.Errorf("ServerSaidNotAdmitted %v, want %v", got, tc.notAdm)
			}
			if got := QuotaCause(err); got != tc.cause {
				t.Errorf("QuotaCause %q, want %q", got, tc.cause)
			}
			if tc.retryAfter != "" && RetryAfter(err) == 0 {
				t.Errorf("Retry-After %s not read", tc.retryAfter)
			}
		})
	}
}

// The nested busy form's text is the detail, not a JSON object.
func TestNestedBusyDetail(t *testing.T) {
	eb := parseErrorBody([]byte(`{"error": {"error": "Conversation is busy with another active run."}}`))
	if eb.detail != "Conversation is busy with another active run." {
		t.Fatalf("detail %q", eb.detail)
	}
	eb = parseErrorBody([]byte(`{"errorCode": "cloud_api_shutting_down", "admitted": false, "retryable": true, "message": "deploying"}`))
	if eb.code != CodeShuttingDown || !eb.notAdmitted || eb.detail != "deploying" {
		t.Fatalf("deploy body read as %+v", eb)
	}
	e := &Error{Op: "send message", StatusCode: 503, Code: CodeShuttingDown, NotAdmitted: true, Detail: "deploying", RetryAfter: time.Second}
	if !strings.Contains(e.Error(), "503") {
		t.Fatal(e.Error())
	}
}
