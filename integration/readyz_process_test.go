package integration

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestProcessReadyzAcrossRedisRestart runs a worker process wired as
// cmd/worker (its HTTP server, /readyz) on a redis-server of the test's own,
// and restarts Redis under load, as a chaos run does: 20 turns at
// once to warm up; then 6 turns thinking 4 s and 12 thinking 1 to 3 s;
// Redis stopped 1 s later and started 8 s after that; 3 new turns 3 s after
// it is back. /readyz must answer 503 (saying why, verbose with the token)
// during the outage and 200 again by itself once Redis is back; the 3 new
// turns and the 18 in flight must be answered, each once, and each user
// message must reach the agent once (the worker never
// ran another turn after such an outage, while /readyz said ready).
func TestProcessReadyzAcrossRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts Redis under load for about a minute")
	}
	rs := testredis.StartPersistent(t)
	e := newEnv(t, withRedis(rs.Server()))
	w := e.spawnWorker("w1", envApp+"=1")
	if w.http == "" {
		t.Fatal("the worker printed no HTTP address")
	}
	readyz := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+w.http+"/readyz?verbose=1", nil)
		req.Header.Set("Authorization", "Bearer "+appToken)
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	// waitReadyz polls /readyz until it answers code, and returns when.
	waitReadyz := func(code int, within time.Duration, what string) (time.Time, string) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			got, body := readyz()
			if got == code {
				return time.Now(), body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz answered %d %s for %v, want %d", what, got, body, within, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReadyz(http.StatusOK, 10*time.Second, "at start")

	agent := e.sim.CreateAgent("readyz", nil)
	type turn struct {
		mark string
		conv record.Conversation
		res  queue.EnqueueResult
	}
	var mu sync.Mutex
	var turns []turn
	enqueue := func(mark string, think time.Duration) turn {
		c := e.conv(mark)
		res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: mark,
			Text: fmt.Sprintf("[[sim think=%s answer=answer-%s]] %s", simDur(think), mark, mark)})
		tu := turn{mark, c, res}
		mu.Lock()
		turns = append(turns, tu)
		mu.Unlock()
		return tu
	}
	answered := func(tu turn, within time.Duration) {
		t.Helper()
		final, evs := e.waitFinal(tu.conv, tu.res.TaskID, within)
		if final.Type != record.EventAnswer || final.Text != "answer-"+tu.mark {
			t.Errorf("%s: final %s %q; events %s", tu.mark, final.Type, final.Text, summarize(evs))
		}
	}
	var warm []turn
	for i := range 20 {
		warm = append(warm, enqueue(fmt.Sprint("warm", i), 100*time.Millisecond))
	}
	for _, tu := range warm {
		answered(tu, 30*time.Second)
	}
	var inflight []turn
	for i := range 6 {
		inflight = append(inflight, enqueue(fmt.Sprint("long", i), 4*time.Second))
	}
	for i := range 12 {
		inflight = append(inflight, enqueue(fmt.Sprint("short", i), time.Second+time.Duration(i)*2*time.Second/12))
	}
	time.Sleep(time.Second) // the turns are at the agent: the outage falls on them
	stoppedAt := time.Now()
	if err := rs.Stop(); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
	downAt, body := waitReadyz(http.StatusServiceUnavailable, 5*time.Second, "Redis down")
	t.Logf("/readyz 503 %v after Redis stopped: %s", downAt.Sub(stoppedAt).Round(time.Millisecond), body)
	if !strings.Contains(body, `"status":"not ready"`) || !strings.Contains(body, "redis") {
		t.Errorf("/readyz?verbose=1 during the outage says %s: want why", body)
	}
	time.Sleep(8 * time.Second) // the outage itself
	if err := rs.Start(); err != nil {
		t.Fatalf("start redis again: %v", err)
	}
	upAt := time.Now()
	readyAt, body := waitReadyz(http.StatusOK, 10*time.Second, "Redis back")
	t.Logf("/readyz 200 again %v after Redis was back: %s", readyAt.Sub(upAt).Round(time.Millisecond), body)
	if d := time.Until(upAt.Add(3 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	var fresh []turn
	for i := range 3 {
		fresh = append(fresh, enqueue(fmt.Sprint("new", i), 200*time.Millisecond))
	}
	for _, tu := range fresh {
		answered(tu, 30*time.Second)
	}
	for _, tu := range inflight {
		answered(tu, asynqRecovery)
	}
	e.settled()
	for _, tu := range turns {
		if n := countFinal(e.events(tu.conv, tu.res.TaskID)); n != 1 {
			t.Errorf("%s: %d final events", tu.mark, n)
		}
		if n := e.sim.CountOtid(tu.res.Otid); n != 1 {
			t.Errorf("%s: otid stored %d times at the agent", tu.mark, n)
		}
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Errorf("/readyz at the end: %d %s", code, body)
	}
	// An 8 s restart is routine: warnings, no error lines.
	var errs []string
	for _, l := range strings.Split(w.out.String(), "\n") {
		if strings.Contains(l, "level=ERROR") {
			errs = append(errs, l)
		}
	}
	if len(errs) > 0 {
		t.Errorf("the worker logged %d error lines for an 8 s Redis restart:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	warns := map[string]int{}
	for _, l := range strings.Split(w.out.String(), "\n") {
		if _, rest, ok := strings.Cut(l, "level=WARN msg="); ok {
			msg := rest
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				msg = q
			}
			warns[msg]++
		}
	}
	t.Logf("the worker's warnings: %v", warns)
}
