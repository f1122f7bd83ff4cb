package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/shard"
)

// BudgetInfo is what GET /budget answers: what a producer in another language needs to write a
// turn task that the workers run as they would their own (see docs/enqueue-from-other-languages.md).
type BudgetInfo struct {
	TaskType           string         `json:"task_type"`            // "lettaq:turn"
	PayloadVersion     int            `json:"payload_version"`      // the payload's "v"
	TaskTimeoutSeconds int64          `json:"task_timeout_seconds"` // the Asynq task timeout, whole seconds
	TaskTimeout        string         `json:"task_timeout"`         // the same, e.g. "32m40s"
	Formula            string         `json:"formula"`              // how it adds up, e.g. "2 × (connect 30s + …) + …"
	ResendPolicy       string         `json:"resend_policy"`        // whether the four phases count twice
	Terms              []TermInfo     `json:"phases"`               // the budget's terms, in order (the wire keeps its first name, "phases")
	MaxRetry           int            `json:"max_retry"`            // LETTAQ_MAX_RETRY + 1 (one kept for put-backs)
	RetentionSeconds   int64          `json:"retention_seconds"`    // how long a finished task is kept
	Queues             map[string]int `json:"queues"`               // the queues the workers take turns from, with weights
	EnqueueQueue       string         `json:"enqueue_queue"`        // the queue /enqueue uses (highest weight); "" with shards: the chat's shard's
	Shards             int            `json:"shards"`               // LETTAQ_SHARDS
	ShardFunction      string         `json:"shard_function"`       // how a chat's shard is computed
	ShardQueues        []string       `json:"shard_queues"`         // each shard's queue, by shard
	ShardTaskID        string         `json:"shard_task_id"`        // how a task id names its shard
	ShardKeyPrefixes   []string       `json:"shard_key_prefixes"`   // each shard's key prefix, by shard
	LayoutKey          string         `json:"layout_key"`           // where the deployment's layout is recorded
	Layout             string         `json:"layout"`               // the layout recorded there
	KeyPrefix          string         `json:"key_prefix"`           // LETTAQ_KEY_PREFIX
	Ordering           string         `json:"ordering"`             // conversation, agent or off
	OrderingPrefix     string         `json:"ordering_prefix"`      // where the ordering lines live
}

// TermInfo is one term of the task timeout (budget.Term).
type TermInfo struct {
	Name    string  `json:"name"`    // e.g. "connect", "resend-stream", "safety-margin"
	Seconds float64 `json:"seconds"` // its maximum
	Var     string  `json:"var"`     // the variable that sets it
}

// NewBudgetInfo describes cfg's task options for producers.
func NewBudgetInfo(cfg WorkerSettings) BudgetInfo {
	b := cfg.Budget
	info := BudgetInfo{
		TaskType:           queue.TaskType,
		PayloadVersion:     queue.PayloadVersion,
		TaskTimeoutSeconds: int64(b.TaskTimeout() / time.Second),
		TaskTimeout:        b.TaskTimeout().String(),
		Formula:            BudgetFormula(b),
		ResendPolicy:       string(b.ResendPolicy),
		MaxRetry:           taskMaxRetry(cfg),
		RetentionSeconds:   int64(queue.DefaultRetention / time.Second),
		Queues:             cfg.Queues,
		EnqueueQueue:       firstQueue(cfg.Queues),
		KeyPrefix:          cfg.KeyPrefix,
		Ordering:           cfg.Ordering,
		OrderingPrefix:     queue.OrderingPrefix(cfg.KeyPrefix),
	}
	describeShards(&info, cfg)
	for _, p := range b.Terms() {
		info.Terms = append(info.Terms, TermInfo{Name: p.Name, Seconds: p.Max.Seconds(), Var: p.Var})
	}
	return info
}

// taskMaxRetry is the Asynq max retry the worker's /enqueue gives its tasks, which producers
// must use: LETTAQ_MAX_RETRY, plus the retry kept for put-backs (queue.TaskMaxRetry).
func taskMaxRetry(cfg WorkerSettings) int { return queue.TaskMaxRetry(cfg.MaxRetry) }

// budgetHandler answers GET /budget.
func budgetHandler(info BudgetInfo) http.Handler {
	body, err := json.Marshal(info)
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(body, '\n'))
	})
}

var phaseLabel = map[string]string{
	budget.TermThread:       "thread",
	budget.TermConnect:      "connect",
	budget.TermStream:       "stream",
	budget.TermAdmission:    "admission",
	budget.TermContinuation: "continuation",
	budget.TermDelivery:     "delivery",
	budget.TermSafetyMargin: "safety margin",
}

// BudgetFormula writes how c's task timeout adds up, e.g.
//
//	task timeout = thread 30s + 2 × (connect 30s + stream 5m + admission 30s + continuation 10m) + delivery 10s + safety margin 30s = 1990s (33m10s)
//
// (the four phases count twice when the resend policy allows one resend). docs/agent-client.md states it
// for the defaults; --help and GET /budget for the configuration in use.
func BudgetFormula(c budget.Config) string {
	var before, attempt, rest []string
	for _, p := range c.Terms() {
		label, ok := phaseLabel[p.Name]
		if !ok {
			continue // the resend repeats of the attempt's phases
		}
		term := label + " " + budget.FormatDuration(p.Max)
		switch p.Name {
		case budget.TermThread:
			before = append(before, term)
		case budget.TermDelivery, budget.TermSafetyMargin:
			rest = append(rest, term)
		default:
			attempt = append(attempt, term)
		}
	}
	sum := strings.Join(attempt, " + ")
	if c.ResendPolicy.AllowsResend() {
		sum = "2 × (" + sum + ")"
	}
	sum = strings.Join(append(append(before, sum), rest...), " + ")
	var exact time.Duration
	for _, p := range c.Terms() {
		exact += p.Max
	}
	rounded := ""
	if exact != c.TaskTimeout() {
		rounded = ", rounded up to whole seconds,"
	}
	tt := c.TaskTimeout()
	return fmt.Sprintf("task timeout = %s%s = %ds (%s)", sum, rounded, int64(tt/time.Second), tt)
}

// describeShards fills in the shards of cfg's layout: with one (the default) its one queue,
// the task ids as TaskIDFor makes them, keys under the key prefix.
func describeShards(info *BudgetInfo, cfg WorkerSettings) {
	n := max(cfg.Shards, 1)
	l, err := shard.New(n, firstQueue(cfg.Queues), cfg.KeyPrefix)
	if err != nil {
		return // refused by the configuration's check before it gets here
	}
	info.Shards = n
	info.ShardQueues = l.Queues()
	for i := range n {
		info.ShardKeyPrefixes = append(info.ShardKeyPrefixes, l.Prefix(i))
	}
	info.LayoutKey, info.Layout = shard.RecordKey(l.BaseQueue()), l.Record()
	if n == 1 {
		info.ShardFunction = "0 (one shard)"
		info.ShardTaskID = "the id unchanged"
		return
	}
	info.EnqueueQueue = ""
	info.ShardFunction = fmt.Sprintf(`the first 4 bytes of SHA-256(integration + ":" + chat_id), big-endian, mod %d; the turn goes to shard_queues[shard]`, n)
	info.ShardTaskID = `"<kind>:{" + shard_queues[shard] + "}:<rest>", e.g. turn:{` + l.Queue(0) + `}:web:alice:m1`
	info.Queues = map[string]int{}
	for _, q := range l.Queues() {
		info.Queues[q] = 1
	}
}
