package app

import (
	"strings"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue"
)

// TestWorkerSettingsLimits: the byte bounds default to the packages' own
// defaults, take sizes with units, and refuse what is not a size.
func TestWorkerSettingsLimits(t *testing.T) {
	c, err := ParseWorkerSettings(nil, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{Event: agentclient.DefaultMaxEventBytes, Response: agentclient.DefaultMaxResponseBytes,
		Transcript: agentclient.DefaultMaxTranscriptBytes, Reply: queue.DefaultMaxReplyBytes}
	if c.Limits != want {
		t.Errorf("defaults %+v, want %+v", c.Limits, want)
	}
	c, err = ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_MAX_EVENT_BYTES": "512KiB",
		"LETTAQ_MAX_RESPONSE_BYTES": "2MiB", "LETTAQ_MAX_TRANSCRIPT_BYTES": "1GiB", "LETTAQ_MAX_REPLY_BYTES": "65536"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Limits{Event: 512 << 10, Response: 2 << 20, Transcript: 1 << 30, Reply: 65536}); c.Limits != want {
		t.Errorf("parsed %+v, want %+v", c.Limits, want)
	}
	for _, bad := range []string{"16MB", "-1", "12", "lots"} {
		_, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_MAX_EVENT_BYTES": bad}), nil)
		if err == nil || !strings.Contains(err.Error(), "LETTAQ_MAX_EVENT_BYTES") {
			t.Errorf("%q: err %v, want one naming LETTAQ_MAX_EVENT_BYTES", bad, err)
		}
	}
}
