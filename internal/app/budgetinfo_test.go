package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
)

// evalFormula adds up a BudgetFormula's terms, independently of how it was written.
func evalFormula(t *testing.T, f string) (sum time.Duration, stated int64) {
	t.Helper()
	m := regexp.MustCompile(`^task timeout = ((?:[a-z ]+ \S+ \+ )*)(2 × \((.*?)\)|(.*?))((?: \+ [a-z ]+ \S+)*)(?:, rounded up to whole seconds,)? = (\d+)s \((\S+)\)$`).FindStringSubmatch(f)
	if m == nil {
		t.Fatalf("formula %q does not read as task timeout = … = Ns (…)", f)
	}
	terms := func(s string) (d time.Duration) {
		for _, term := range strings.Split(strings.TrimPrefix(s, " + "), " + ") {
			if term == "" {
				continue
			}
			v, err := time.ParseDuration(term[strings.LastIndex(term, " ")+1:])
			if err != nil {
				t.Fatalf("term %q of %q: %v", term, f, err)
			}
			d += v
		}
		return d
	}
	sum = terms(strings.TrimSuffix(m[1], " + "))
	if m[3] != "" {
		sum += 2 * terms(m[3])
	} else {
		sum += terms(m[4])
	}
	sum += terms(m[5])
	stated, _ = strconv.ParseInt(m[6], 10, 64)
	if d, err := time.ParseDuration(m[7]); err != nil || d != time.Duration(stated)*time.Second {
		t.Errorf("formula %q: %q is not %ds", f, m[7], stated)
	}
	return sum, stated
}

func TestBudgetFormulaAddsUp(t *testing.T) {
	never := budget.Default()
	never.ResendPolicy = budget.ResendNever
	odd := budget.Default()
	odd.SafetyMargin = 1500 * time.Millisecond
	for _, c := range []budget.Config{budget.Default(), never, DevBudget(), odd} {
		f := BudgetFormula(c)
		sum, stated := evalFormula(t, f)
		if time.Duration(stated)*time.Second != c.TaskTimeout() {
			t.Errorf("%s: states %ds, TaskTimeout is %v", f, stated, c.TaskTimeout())
		}
		if sum > c.TaskTimeout() || c.TaskTimeout()-sum >= time.Second {
			t.Errorf("%s: the terms add up to %v, TaskTimeout is %v", f, sum, c.TaskTimeout())
		}
		if (sum != c.TaskTimeout()) != strings.Contains(f, "rounded up") {
			t.Errorf("%s: says rounded up = %v, but sum %v vs %v", f, strings.Contains(f, "rounded up"), sum, c.TaskTimeout())
		}
	}
}

func TestWorkerHelpShowsTaskTimeout(t *testing.T) {
	help := func(args []string, e map[string]string) string {
		t.Helper()
		var out bytes.Buffer
		if _, err := ParseWorkerSettings(append(args, "--help"), env(e), &out); !errors.Is(err, errHelp) {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	want := func(c budget.Config) string {
		return "Task timeout with this configuration: " + strconv.FormatInt(int64(c.TaskTimeout()/time.Second), 10) + "s"
	}
	if h := help(nil, nil); !strings.Contains(h, want(budget.Default())) || !strings.Contains(h, BudgetFormula(budget.Default())) {
		t.Errorf("--help does not state the default task timeout %q:\n%s", want(budget.Default()), h)
	}
	// The environment and the flags before --help count.
	c := budget.Default()
	c.StreamTotal, c.ResendPolicy = 10*time.Minute, budget.ResendNever
	if h := help([]string{"--resend-policy=never"}, map[string]string{"LETTAQ_STREAM_TOTAL": "10m"}); !strings.Contains(h, want(c)) {
		t.Errorf("--help does not state this configuration's task timeout %q:\n%s", want(c), h)
	}
	if h := help([]string{"--dev"}, nil); !strings.Contains(h, "in dev mode with this configuration: "+strconv.FormatInt(int64(DevBudget().TaskTimeout()/time.Second), 10)+"s") {
		t.Errorf("--dev --help does not state dev mode's task timeout:\n%s", h)
	}
	if h := help(nil, map[string]string{"LETTAQ_STALL_TIMEOUT": "10m"}); !strings.Contains(h, "not computable") || !strings.Contains(h, "LETTAQ_STALL_TIMEOUT") {
		t.Errorf("--help with a broken budget:\n%s", h)
	}
}

func TestBudgetEndpoint(t *testing.T) {
	cfg, err := ParseWorkerSettings([]string{"--queues=hi=3,lo", "--max-retry=7", "--key-prefix={lq}:", "--ordering=agent"},
		env(map[string]string{"LETTAQ_CONTINUATION_MAX": "20m"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	info := NewBudgetInfo(cfg)
	h, closeMon := NewHTTPHandler(HTTPOptions{Token: "tok", Redis: rdb, Budget: &info})
	defer closeMon()
	ts := httptest.NewServer(h)
	defer ts.Close()

	if code, _ := get(t, ts.Client(), ts.URL+"/budget", nil); code != http.StatusUnauthorized {
		t.Errorf("/budget without token = %d, want 401 (same auth as /metrics)", code)
	}
	code, body := get(t, ts.Client(), ts.URL+"/budget", map[string]string{"Authorization": "Bearer tok"})
	if code != 200 {
		t.Fatalf("/budget = %d %s", code, body)
	}
	var got struct {
		TaskType           string         `json:"task_type"`
		PayloadVersion     int            `json:"payload_version"`
		TaskTimeoutSeconds int64          `json:"task_timeout_seconds"`
		TaskTimeout        string         `json:"task_timeout"`
		Formula            string         `json:"formula"`
		MaxRetry           int            `json:"max_retry"`
		RetentionSeconds   int64          `json:"retention_seconds"`
		Queues             map[string]int `json:"queues"`
		EnqueueQueue       string         `json:"enqueue_queue"`
		KeyPrefix          string         `json:"key_prefix"`
		Ordering           string         `json:"ordering"`
		OrderingPrefix     string         `json:"ordering_prefix"`
		Phases             []struct {
			Name    string  `json:"name"`
			Seconds float64 `json:"seconds"`
			Var     string  `json:"var"`
		} `json:"phases"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	b := cfg.Budget
	if got.TaskTimeoutSeconds != int64(b.TaskTimeout()/time.Second) || got.TaskTimeoutSeconds != 2*15+2*(30+300+30+1200)+10+30 {
		t.Errorf("task_timeout_seconds = %d, want %v", got.TaskTimeoutSeconds, b.TaskTimeout())
	}
	if d, err := time.ParseDuration(got.TaskTimeout); err != nil || d != b.TaskTimeout() {
		t.Errorf("task_timeout = %q", got.TaskTimeout)
	}
	var sum float64
	for _, p := range got.Phases {
		sum += p.Seconds
		if !strings.HasPrefix(p.Var, "LETTAQ_") {
			t.Errorf("phase %+v names no variable", p)
		}
	}
	if len(got.Phases) != len(b.Terms()) || sum != b.TaskTimeout().Seconds() {
		t.Errorf("phases %+v add up to %vs, task timeout %v", got.Phases, sum, b.TaskTimeout())
	}
	if got.Formula != BudgetFormula(b) {
		t.Errorf("formula = %q", got.Formula)
	}
	if got.TaskType != queue.TaskType || got.PayloadVersion != queue.PayloadVersion || got.MaxRetry != queue.TaskMaxRetry(7) ||
		got.RetentionSeconds != int64(queue.DefaultRetention/time.Second) ||
		got.Queues["hi"] != 3 || got.Queues["lo"] != 1 || got.EnqueueQueue != "hi" ||
		got.KeyPrefix != "{lq}:" || got.Ordering != "agent" || got.OrderingPrefix != queue.OrderingPrefix("{lq}:") {
		t.Errorf("/budget = %s", body)
	}
}

// The running worker serves its own configuration's budget.
func TestDevWorkerServesBudget(t *testing.T) {
	r := startDevWorker(t)
	code, body := get(t, http.DefaultClient, "http://"+r.HTTPAddr+"/budget", nil)
	want := `"task_timeout_seconds":` + strconv.FormatInt(int64(DevBudget().TaskTimeout()/time.Second), 10) + ","
	if code != 200 || !strings.Contains(body, want) {
		t.Errorf("/budget = %d %s; want %s", code, body, want)
	}
}

// /budget names the shards a producer in another language enqueues by: N, the function, each
// shard's queue (the one its chats' turns go to) and key prefix, and the recorded layout.
func TestBudgetInfoSaysTheShards(t *testing.T) {
	cfg := WorkerSettings{Budget: budget.Default(), Queues: map[string]int{"lettaq": 1}, KeyPrefix: "{lettaq}:", Shards: 4}
	info := NewBudgetInfo(cfg)
	want := []string{"lettaq-0-3", "lettaq-1-31", "lettaq-2-3", "lettaq-3-22"}
	if strings.Join(info.ShardQueues, ",") != strings.Join(want, ",") || info.Shards != 4 {
		t.Errorf("shards %d, queues %q; want 4, %q", info.Shards, info.ShardQueues, want)
	}
	if len(info.Queues) != 4 || info.Queues["lettaq-2-3"] != 1 || info.EnqueueQueue != "" {
		t.Errorf("queues %v, enqueue_queue %q: want the 4 shards' queues with weight 1 and no single queue", info.Queues, info.EnqueueQueue)
	}
	if info.ShardKeyPrefixes[2] != "lettaq:{lettaq-2-3}:" || info.LayoutKey != "lettaq:layout:lettaq" ||
		info.Layout != "scheme=1 shards=4 queue=lettaq prefix={lettaq}:" {
		t.Errorf("prefixes %q, layout %s = %q", info.ShardKeyPrefixes, info.LayoutKey, info.Layout)
	}
	if !strings.Contains(info.ShardFunction, "SHA-256(integration + \":\" + chat_id), big-endian, mod 4") {
		t.Errorf("function %q", info.ShardFunction)
	}
	one := NewBudgetInfo(WorkerSettings{Budget: budget.Default(), Queues: map[string]int{"lettaq": 1}, KeyPrefix: "lettaq:"})
	if one.Shards != 1 || one.EnqueueQueue != "lettaq" || strings.Join(one.ShardQueues, ",") != "lettaq" || one.ShardKeyPrefixes[0] != "lettaq:" {
		t.Errorf("one shard: %+v", one)
	}
}
