package app

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// shellWords splits a printed command line as a POSIX shell would (words, single quotes).
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var (
		words []string
		cur   strings.Builder
		in    bool // a word has started
		quote bool
	)
	for _, r := range line {
		switch {
		case quote && r == '\'':
			quote = false
		case quote:
			cur.WriteRune(r)
		case r == '\'':
			quote, in = true, true
		case r == ' ':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote {
		t.Fatalf("unbalanced quote in %q", line)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// runHint runs a printed enqueue command line in-process (the command name stripped), with
// no environment: everything it needs must be on the line.
func runHint(t *testing.T, line string) (code int, stdout, stderr string) {
	t.Helper()
	line = strings.TrimSpace(line)
	cmd := shellWords(t, enqueueCommand)
	if !strings.HasPrefix(line, enqueueCommand+" ") && !strings.HasPrefix(line, "go run ./cmd/enqueue ") {
		t.Fatalf("hint %q does not start with the command %q", line, enqueueCommand)
	}
	if strings.HasPrefix(line, "go run ./cmd/enqueue ") {
		cmd = []string{"go", "run", "./cmd/enqueue"}
	}
	args := shellWords(t, line)[len(cmd):]
	var out, errOut syncBuf
	code = RunEnqueue(context.Background(), args, env(nil), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// lineAfter returns the line that follows the first line containing marker.
func lineAfter(t *testing.T, text, marker string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.Contains(l, marker) && i+1 < len(lines) {
			return lines[i+1]
		}
	}
	t.Fatalf("no line after %q in:\n%s", marker, text)
	return ""
}

// Every command enqueue and the dev worker print for the operator runs as printed and finds
// the turn: with --dev, a dev Redis on another port and a key prefix of its own carried.
func TestPrintedHintsRun(t *testing.T) {
	const prefix = "hint{x}:"
	r, greeting := startDevWorkerWith(t, "--key-prefix="+prefix)
	run := func(args ...string) (int, string, string) {
		var out, errOut syncBuf
		args = append([]string{"--dev", "--dev-redis-addr=" + r.RedisAddr, "--key-prefix=" + prefix}, args...)
		code := RunEnqueue(context.Background(), args, env(nil), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	// --wait gives up: its hint shows the turn.
	code, _, errOut := run("--wait", "--timeout=300ms", "[[sim think=30s]] slow")
	if code != ExitTimedOut {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	taskID := strings.Fields(strings.TrimPrefix(errOut[strings.Index(errOut, "enqueued task "):], "enqueued task "))[0]
	hint := lineAfter(t, errOut, "no answer within")
	code, out, hintErr := runHint(t, hint)
	if code != ExitOK || !strings.Contains(out, taskID) {
		t.Errorf("the timeout's hint %q: exit %d, stdout %q, stderr %q; want the record of %s", hint, code, out, hintErr, taskID)
	}

	// journal show of an unknown id points to journal recent, which lists the turn.
	code, _, errOut = run("journal", "show", "no-such-turn")
	if code != ExitFailed {
		t.Errorf("journal show no-such-turn: exit %d", code)
	}
	hint = lineAfter(t, errOut, "no turn has")
	code, out, hintErr = runHint(t, hint)
	if code != ExitOK || !strings.Contains(out, taskID) {
		t.Errorf("the not-found hint %q: exit %d, stdout %q, stderr %q", hint, code, out, hintErr)
	}

	// The greeting's journal line reaches this worker's Redis and prefix.
	var greet string
	for _, l := range strings.Split(greeting, "\n") {
		if strings.Contains(l, "journal recent") {
			greet = strings.TrimSpace(l[:strings.Index(l, "#")])
		}
	}
	code, out, hintErr = runHint(t, greet)
	if code != ExitOK || !strings.Contains(out, taskID) {
		t.Errorf("the greeting's %q: exit %d, stdout %q, stderr %q", greet, code, out, hintErr)
	}
}

// journal show takes a whole id, a cut one, a unique beginning; a shared beginning lists the
// turns; the table prints ids whole.
func TestJournalShowTakesPrefixes(t *testing.T) {
	r := startDevWorker(t)
	var ids []string
	for _, text := range []string{"one", "two"} {
		code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--json", text)
		if code != ExitOK {
			t.Fatalf("enqueue %s: exit %d %q", text, code, errOut)
		}
		ids = append(ids, strings.Split(strings.SplitN(out, `"task_id":"`, 2)[1], `"`)[0])
	}
	for _, in := range []string{ids[0], ids[0][:14], strings.TrimPrefix(ids[0], "turn:")[:9], ids[0][:20] + "…"} {
		code, out, errOut := enqueue(t, r, "journal", "show", in)
		if code != ExitOK || !strings.Contains(out, ids[0]) {
			t.Errorf("journal show %q: exit %d, stdout %q, stderr %q", in, code, out, errOut)
		}
	}
	code, _, errOut := enqueue(t, r, "journal", "show", "turn:")
	if code != ExitUsage || !strings.Contains(errOut, ids[0]) || !strings.Contains(errOut, ids[1]) {
		t.Errorf("journal show turn: (ambiguous): exit %d, stderr %q; want %d naming both turns", code, errOut, ExitUsage)
	}
	code, _, errOut = enqueue(t, r, "journal", "show", "turn:zzz")
	if code != ExitFailed || !strings.Contains(errOut, `"turn:zzz"`) {
		t.Errorf("journal show turn:zzz: exit %d, stderr %q", code, errOut)
	}

	// On a terminal, the table holds the ids whole.
	tty, read := openPTY(t)
	var errBuf syncBuf
	code = RunEnqueue(context.Background(), []string{"--dev", "--dev-redis-addr=" + r.RedisAddr, "journal", "recent"},
		env(nil), nil, tty, &errBuf)
	table := read()
	if code != ExitOK || !strings.Contains(table, ids[0]) || !strings.Contains(table, ids[1]) {
		t.Errorf("journal recent on a terminal: exit %d, stderr %q; want both ids whole in:\n%s", code, errBuf.String(), table)
	}
}

const hostile = "\x1b]0;pwned\x07 \x1b[2J\u009b31m"

// assertNoInjection fails when out holds one of hostile's control sequences raw.
func assertNoInjection(t *testing.T, what, out string) {
	t.Helper()
	for _, seq := range []string{"\x1b]0;", "\x07", "\x1b[2J", "\u009b"} {
		if strings.Contains(out, seq) {
			t.Errorf("%s prints %q raw:\n%q", what, seq, out)
		}
	}
}

// A hostile chat id or answer cannot reach the operator's terminal as control sequences:
// not through journal recent/show, the live view, the answer or an error.
func TestTerminalInjectionEscaped(t *testing.T) {
	r := startDevWorker(t)

	// A record with a hostile chat id, as another producer (or an older version) wrote it.
	rdb := redis.NewClient(&redis.Options{Addr: r.RedisAddr})
	defer rdb.Close()
	j := queue.NewJournal(rdb, queue.JournalOptions{Prefix: r.Config.KeyPrefix})
	rec := &record.TurnRecord{TaskID: "turn:web:" + hostile + ":1", Otid: "0b0e8c0e-1d8a-4c1e-9b1a-6a4f1b2c3d4e",
		AgentID: DemoAgent, Conversation: record.Conversation{Integration: "web", ChatID: hostile},
		Outcome: record.OutcomeFailed, Error: "agent said " + hostile, EnqueuedAt: time.Now()}
	if err := j.Save(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"journal", "recent"}, {"journal", "show", "turn:web:"}, {"journal", "show", "--json", "turn:web:"}} {
		tty, read := openPTY(t)
		var errBuf syncBuf
		code := RunEnqueue(context.Background(), append([]string{"--dev", "--dev-redis-addr=" + r.RedisAddr}, args...),
			env(nil), nil, tty, &errBuf)
		out := read()
		if code != ExitOK || !strings.Contains(out, "pwned") {
			t.Errorf("%v: exit %d, stderr %q, out %q", args, code, errBuf.String(), out)
		}
		assertNoInjection(t, strings.Join(args, " "), out)
	}

	// The demo agent repeats the message: a hostile answer, shown live on a terminal.
	tty, read := openPTY(t)
	var errBuf syncBuf
	code := RunEnqueue(context.Background(), []string{"--dev", "--dev-redis-addr=" + r.RedisAddr, "--wait", "--timeout=30s",
		"hi " + hostile}, env(nil), nil, tty, &errBuf)
	out := read()
	if code != ExitOK || !strings.Contains(out, "pwned") {
		t.Errorf("--wait on a terminal: exit %d, stderr %q, out %q", code, errBuf.String(), out)
	}
	assertNoInjection(t, "the live answer", out)
	// The ids are shown on a terminal too.
	if !strings.Contains(errBuf.String(), "enqueued task turn:") {
		t.Errorf("--wait on a terminal hides the task id; stderr %q", errBuf.String())
	}

	// A hostile error text on stderr.
	var errOut syncBuf
	RunEnqueue(context.Background(), []string{"--dev", "--dev-redis-addr=" + r.RedisAddr, "journal", "show", hostile},
		env(nil), nil, &syncBuf{}, &errOut)
	if !strings.Contains(errOut.String(), "pwned") {
		t.Errorf("journal show of a hostile id: stderr %q", errOut.String())
	}
	assertNoInjection(t, "stderr", errOut.String())
}

// A hint repeats the non-default connection settings, quoted for a shell, and never a
// Redis password.
func TestHintCarriesSettings(t *testing.T) {
	o := enqueueOpts{redisURL: "redis://:s3cret@redis.internal:6390/2", clusterAddrs: "", prefix: "{a b}:", devRedis: DefaultDevRedisAddr}
	got := o.commandLine("enqueue", "journal", "show", "turn:x y")
	want := `enqueue --redis-url=redis://xxx@redis.internal:6390/2 --key-prefix='{a b}:' journal show 'turn:x y'`
	if got != want {
		t.Errorf("hint %q, want %q", got, want)
	}
	if w := shellWords(t, got); len(w) != 6 || w[2] != "--key-prefix={a b}:" || w[5] != "turn:x y" {
		t.Errorf("the hint splits into %q", w)
	}
	o = enqueueOpts{redisURL: DefaultRedisURL, prefix: "lettaq:", devRedis: DefaultDevRedisAddr}
	if got := o.commandLine("enqueue", "journal", "recent"); got != "enqueue journal recent" {
		t.Errorf("defaults: hint %q", got)
	}
}

// commandsBeside links the test binary as DIR/bin/enqueue and DIR/bin/worker (TestMain runs
// it as the command it is named after) and returns DIR: the commands as go build -o bin/
// makes them.
func commandsBeside(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"enqueue", "worker"} {
		if err := os.Symlink(exe, filepath.Join(dir, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// shIn runs line with sh in dir and returns its exit code and output.
func shIn(t *testing.T, dir, line string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", line, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// bin/enqueue --dev with no dev worker names the worker to start as it was invoked
// (bin/worker, not worker), and that line, run as printed by a shell, starts the dev worker
// the same bin/enqueue then reaches.
func TestDevWorkerHintRunsAsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev worker process")
	}
	dir := commandsBeside(t)
	addr := closedAddr(t)
	code, out := shIn(t, dir, "bin/enqueue --dev --dev-redis-addr="+addr+" journal recent")
	_, rest, ok := strings.Cut(out, "start it with `")
	hint, _, ok2 := strings.Cut(rest, "`")
	if code != ExitNoRedis || !ok || !ok2 {
		t.Fatalf("exit %d, want %d with a command to start the dev worker:\n%s", code, ExitNoRedis, out)
	}
	if !strings.HasPrefix(hint, "bin/worker ") {
		t.Fatalf("the hint %q does not name the worker beside bin/enqueue (bin/worker)", hint)
	}
	worker := exec.Command("sh", "-c", "exec "+hint)
	worker.Dir = dir
	var wout syncBuf
	worker.Stdout, worker.Stderr = &wout, &wout
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = worker.Process.Signal(syscall.SIGTERM)
		_ = worker.Wait()
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, out = shIn(t, dir, "bin/enqueue --dev --dev-redis-addr="+addr+" journal recent")
		if code == ExitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the printed %q did not start a dev worker bin/enqueue reaches: enqueue exit %d:\n%s\nworker:\n%s", hint, code, out, wout.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Under go run, hints name go run ./cmd/…, also when the build cache (where go run keeps the
// executables it builds) is a folder whose path has no "go-build" in it.
func TestHintsNameGoRunWhateverGOCACHE(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("GOCACHE", cache)
	arg0 := filepath.Join(cache, "3f", "3f0a9c-d", "worker")
	if got := greetingEnqueue(arg0); got != "go run ./cmd/enqueue" {
		t.Errorf("greetingEnqueue(%q) with GOCACHE=%s = %q, want go run ./cmd/enqueue", arg0, cache, got)
	}
	if got := commandBeside(filepath.Join(cache, "3f", "3f0a9c-d", "enqueue"), "worker", os.Getenv); got != "go run ./cmd/worker" {
		t.Errorf("the worker beside a cached enqueue = %q, want go run ./cmd/worker", got)
	}
	for arg0, want := range map[string]string{"bin/enqueue": "bin/worker", "enqueue": "worker", "/tmp/go-build1/b001/exe/enqueue": "go run ./cmd/worker"} {
		if got := commandBeside(arg0, "worker", os.Getenv); got != want {
			t.Errorf("commandBeside(%q, worker) = %q, want %q", arg0, got, want)
		}
	}
}
