package attempt

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestTurnLoggerStampsIDs(t *testing.T) {
	var buf bytes.Buffer
	ids := &IDs{TaskID: "turn:t:c:1", Otid: "otid-1"}
	log := newLogger(slog.New(slog.NewJSONHandler(&buf, nil)), ids)
	log.Info("before the run is known")
	ids.setRunID("run-1")
	log.Info("after", "n", 1)
	log.Info("explicit run id wins", "run_id", "run-explicit")
	log.With("otid", "otid-with").Info("otid from With")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []struct{ run, otid string }{{"", "otid-1"}, {"run-1", "otid-1"}, {"run-explicit", "otid-1"}, {"run-1", "otid-with"}}
	if len(lines) != len(want) {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	for i, l := range lines {
		for _, k := range []string{`"task_id":`, `"otid":`, `"run_id":`} {
			if n := strings.Count(l, k); n != 1 {
				t.Errorf("line %d has %s %d times: %s", i, k, n, l)
			}
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["task_id"] != "turn:t:c:1" || m["otid"] != want[i].otid || m["run_id"] != want[i].run {
			t.Errorf("line %d: %s", i, l)
		}
	}
}
