package app

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestUnknownVars(t *testing.T) {
	set := map[string]string{
		"LETTAQ_CONCURENCY":    "5",     // misspelled
		"LETTAQ_LOGLEVEL":      "debug", // misspelled
		"LETTAQ_API_KEY":       "x",     // the wrong prefix
		"LETTAQ_TOKEN":         "x",     // half a name
		"LETTAQ_FROBNICATE":    "x",     // nothing like it
		"LETTA_BASEURL":        "x",     // misspelled, Letta's prefix
		"LETTA_PG_URI":         "x",     // Letta's own: not ours to judge
		"LETTAQ_CONCURRENCY":   "5",     // known
		"LETTAQ_QUEUE":         "q",     // known to enqueue
		"LETTAQ_STALL_TIMEOUT": "90s",   // known (budget)
		"LETTAQ_E2E_WORKER":    "1",     // lettaq's own tests
		"LETTAQ_REQUIRE_REDIS": "1",     // lettaq's own tests
		"LETTAQ_EMPTY":         "",      // set but empty: as if unset
		"HOME":                 "/root", // not ours
	}
	var environ []string
	for k, v := range set {
		environ = append(environ, k+"="+v)
	}
	got := unknownVars(environ, env(set))
	want := []unknownVar{
		{"LETTAQ_API_KEY", "LETTA_API_KEY"},
		{"LETTAQ_CONCURENCY", "LETTAQ_CONCURRENCY"},
		{"LETTAQ_FROBNICATE", ""},
		{"LETTAQ_LOGLEVEL", "LETTAQ_LOG_LEVEL"},
		{"LETTAQ_TOKEN", "LETTAQ_HTTP_TOKEN"},
		{"LETTA_BASEURL", "LETTA_BASE_URL"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unknownVars =\n%+v\nwant\n%+v", got, want)
	}
}

// The worker warns at start, before a configuration error that the misspelling may explain.
func TestWorkerWarnsAboutUnknownVars(t *testing.T) {
	t.Setenv("LETTAQ_HTTP_TOKN", "s3cret")
	t.Setenv("LETTAQ_HTTP_ADDR", "0.0.0.0:0")
	var out, errOut strings.Builder
	code := RunWorker(context.Background(), nil, os.Getenv, &out, &errOut)
	if code != ExitUsage {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if lines := strings.Count(errOut.String(), "unknown environment variable"); lines != 1 ||
		!strings.Contains(errOut.String(), `"name":"LETTAQ_HTTP_TOKN"`) ||
		!strings.Contains(errOut.String(), `"did_you_mean":"LETTAQ_HTTP_TOKEN"`) {
		t.Errorf("want one warning naming LETTAQ_HTTP_TOKN and LETTAQ_HTTP_TOKEN; stderr:\n%s", errOut.String())
	}
	if strings.Contains(errOut.String(), "s3cret") {
		t.Error("the warning shows the variable's value")
	}
}

// A worker that starts warns too (dev mode, stopped at once).
func TestStartedWorkerWarnsAboutUnknownVars(t *testing.T) {
	t.Setenv("LETTAQ_CONCURENCY", "5")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut syncBuf
	code := RunWorker(ctx, []string{"--dev", "--dev-redis-addr=127.0.0.1:0", "--dev-letta-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0",
		"--log-format=json"}, os.Getenv, &out, &errOut)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), `"did_you_mean":"LETTAQ_CONCURRENCY"`) {
		t.Errorf("no warning about LETTAQ_CONCURENCY; stderr:\n%s", errOut.String())
	}
}

func TestEnqueueWarnsAboutUnknownVars(t *testing.T) {
	t.Setenv("LETTAQ_AGENTID", "agent-1")
	var out, errOut strings.Builder
	code := RunEnqueue(context.Background(), nil, os.Getenv, strings.NewReader(""), &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "LETTAQ_AGENTID") || !strings.Contains(errOut.String(), "LETTAQ_AGENT_ID") {
		t.Errorf("exit %d, stderr:\n%s\nwant a warning naming LETTAQ_AGENTID and LETTAQ_AGENT_ID", code, errOut.String())
	}
}

// Durations without a unit, and other bad flag values, say what to write.
func TestFlagValueErrorsSayWhatToWrite(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "5", "hi"}, `--timeout "5": write a duration with a unit, e.g. 5s or 5m`},
		{[]string{"--timeout=soon", "hi"}, `--timeout "soon": write a duration with a unit, e.g. 500ms, 5s or 2m`},
		{[]string{"--limit", "many", "journal"}, `--limit "many": write a whole number`},
		{[]string{"--max-retry=x", "hi"}, `--max-retry "x": write a whole number`},
		{[]string{"--wait=maybe", "hi"}, `--wait "maybe": want true or false`},
	} {
		var out, errOut strings.Builder
		code := RunEnqueue(context.Background(), tc.args, env(nil), strings.NewReader(""), &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), tc.want) || strings.Contains(errOut.String(), "parse error") {
			t.Errorf("enqueue %v: exit %d, stderr %q; want %q", tc.args, code, errOut.String(), tc.want)
		}
	}
	var out, errOut strings.Builder
	if code := RunEnqueue(context.Background(), []string{"hi"}, env(map[string]string{"LETTAQ_MAX_RETRY": "lots"}), nil, &out, &errOut); code != ExitUsage ||
		!strings.Contains(errOut.String(), `LETTAQ_MAX_RETRY="lots": write a whole number`) {
		t.Errorf("LETTAQ_MAX_RETRY=lots: exit %d, stderr %q", code, errOut.String())
	}
	_, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_SHUTDOWN_TIMEOUT": "60"}), nil)
	if err == nil || !strings.Contains(err.Error(), `LETTAQ_SHUTDOWN_TIMEOUT="60": write a duration with a unit, e.g. 60s`) {
		t.Errorf("worker: %v", err)
	}
}

// TestVarsTheTestsReadAreNotReportedUnknown: .ci/run exports the variables lettaq's own tests
// read (LETTAQ_REQUIRE_BROWSER, say) into the environment of every command the tests start; a
// worker started there must not warn about them, or the tests that count its warnings fail.
// Every LETTAQ_ name a Go file in the repository passes to os.Getenv is known or a test's.
func TestVarsTheTestsReadAreNotReportedUnknown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`Getenv\("(LETTAQ_[A-Z0-9_]+)"\)`)
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 3 {
		t.Fatalf("found only %v: the scan is broken", seen)
	}
	var environ []string
	for name := range seen {
		environ = append(environ, name+"=1")
	}
	for _, u := range unknownVars(environ, func(string) string { return "1" }) {
		t.Errorf("%s is read by lettaq's code or tests but a command would warn that it is unknown", u.Name)
	}
}
