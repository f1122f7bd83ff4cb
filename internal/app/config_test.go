package app

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestWorkerSettingsDefaults(t *testing.T) {
	c, err := ParseWorkerSettings(nil, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 200 || c.HTTPAddr != DefaultHTTPAddr || c.LettaBaseURL != "http://localhost:8283" ||
		c.Queues["lettaq"] != 1 || c.TaskCheckInterval != 100*time.Millisecond || c.LogFormat != "auto" ||
		c.Budget != budget.Default() || c.MonitorWritable || c.Dev || c.WorkerID == "" || c.StreamTransport != agentclient.StreamDedicated ||
		c.ThreadMode != queue.ThreadConversation {
		t.Errorf("defaults: %+v", c)
	}
}

func TestWorkerSettingsFlagOverridesEnv(t *testing.T) {
	e := env(map[string]string{
		"LETTAQ_CONCURRENCY": "50", "LETTAQ_STALL_TIMEOUT": "90s", "LETTAQ_QUEUES": "a=3,b",
		"LETTA_BASE_URL": "http://letta:8283", "LETTAQ_MONITOR_WRITABLE": "true",
	})
	c, err := ParseWorkerSettings([]string{"--concurrency=7", "--stall-timeout", "100s", "--monitor-writable=false", "--log-level", "debug"}, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Concurrency != 7 || c.Budget.StallTimeout != 100*time.Second || c.MonitorWritable || c.LogLevel != "debug" {
		t.Errorf("flags did not win: %+v", c)
	}
	if c.LettaBaseURL != "http://letta:8283" || c.Queues["a"] != 3 || c.Queues["b"] != 1 {
		t.Errorf("env ignored: %+v", c)
	}
	// Dev mode shrinks the clocks it was not told about, and keeps those it was.
	c, err = ParseWorkerSettings([]string{"--dev", "--stall-timeout=3s"}, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Dev || c.Budget.StreamTotal != 8*time.Second || c.Budget.StallTimeout != 3*time.Second || !c.Budget.Background {
		t.Errorf("dev budget = %+v", c.Budget)
	}
}

func TestWorkerSettingsErrorsNameTheVariable(t *testing.T) {
	tests := []struct {
		env  map[string]string
		args []string
		want []string
	}{
		{map[string]string{"LETTAQ_CONCURRENCY": "lots"}, nil, []string{"LETTAQ_CONCURRENCY", "--concurrency"}},
		{nil, []string{"--concurrency=0"}, []string{"LETTAQ_CONCURRENCY", "--concurrency"}},
		{map[string]string{"LETTAQ_STALL_TIMEOUT": "75"}, nil, []string{"LETTAQ_STALL_TIMEOUT", "with a unit"}},
		{nil, []string{"--stall-timeout=10m"}, []string{"LETTAQ_STALL_TIMEOUT", "LETTAQ_STREAM_TOTAL", "--stall-timeout"}},
		{map[string]string{"REDIS_URL": "http://x"}, nil, []string{"REDIS_URL"}},
		{map[string]string{"LETTAQ_QUEUES": "a=x"}, nil, []string{"LETTAQ_QUEUES"}},
		{map[string]string{"LETTAQ_LOG_FORMAT": "xml"}, nil, []string{"LETTAQ_LOG_FORMAT"}},
		{map[string]string{"LETTAQ_HTTP_ADDR": "0.0.0.0:8080"}, nil, []string{"LETTAQ_HTTP_TOKEN", "LETTAQ_HTTP_ADDR"}},
		{map[string]string{"LETTA_BASE_URL": "letta:8283"}, nil, []string{"LETTA_BASE_URL"}},
		{map[string]string{"LETTA_STREAM_TRANSPORT": "h2"}, nil, []string{"LETTA_STREAM_TRANSPORT", `"h2"`, "dedicated", "net/http"}},
		{map[string]string{"LETTAQ_REDIS_CLUSTER_ADDRS": "a,b"}, nil, []string{"LETTAQ_REDIS_CLUSTER_ADDRS"}},
		// On Redis Cluster the keys of one turn must share a slot: the prefix needs a hash tag.
		{map[string]string{"LETTAQ_REDIS_CLUSTER_ADDRS": "n1:7000,n2:7000"}, nil,
			[]string{"LETTAQ_KEY_PREFIX", `"lettaq:"`, "--key-prefix", "hash tag", "CROSSSLOT", "{lettaq}:"}},
		{map[string]string{"LETTAQ_REDIS_CLUSTER_ADDRS": "n1:7000", "LETTAQ_KEY_PREFIX": "{}lettaq:"}, nil,
			[]string{"LETTAQ_KEY_PREFIX", "hash tag", "CROSSSLOT"}},
		{nil, []string{"--redis-cluster-addrs=n1:7000", "--key-prefix={lettaq:"}, []string{"LETTAQ_KEY_PREFIX", "hash tag"}},
		{nil, []string{"--no-such-flag"}, []string{"no-such-flag"}},
		{map[string]string{"LETTAQ_THREAD_MODE": "thread"}, nil, []string{"LETTAQ_THREAD_MODE", "--thread-mode", "conversation, default or agent"}},
	}
	for _, tt := range tests {
		_, err := ParseWorkerSettings(tt.args, env(tt.env), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("%v %v: err = %v, want a ConfigError", tt.env, tt.args, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v %v: error %q does not mention %s", tt.env, tt.args, err, w)
			}
		}
	}
}

func TestWorkerSettingsSecretsNeverShown(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseWorkerSettings([]string{"--help"}, env(map[string]string{"LETTA_API_KEY": "sk-secret-123", "LETTAQ_HTTP_TOKEN": "tok-456"}), &out)
	if !errors.Is(err, errHelp) {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sk-secret-123") || strings.Contains(out.String(), "tok-456") {
		t.Error("--help shows a secret")
	}
}

func TestWorkerHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseWorkerSettings([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, errHelp) {
		t.Fatal(err)
	}
	help := out.String()
	for _, v := range WorkerVars() {
		def := v.Default
		if v.Secret {
			def = "unset"
		} else if def == "" {
			def = `""`
		}
		want := "--" + v.Flag + "  (env " + v.Name + ", default " + def + ")"
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	for _, b := range budget.Vars() {
		if !strings.Contains(help, b.Name) {
			t.Errorf("--help lacks budget variable %s", b.Name)
		}
	}
}

// The help's defaults are the truth: parsing an empty environment gives them.
func TestWorkerHelpDefaultsAreTrue(t *testing.T) {
	all := map[string]string{}
	for _, v := range WorkerVars() {
		if v.Default != "" && !strings.HasPrefix(v.Default, "<") {
			all[v.Name] = v.Default
		}
	}
	a, err := ParseWorkerSettings(nil, env(all), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseWorkerSettings(nil, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	a.WorkerID, b.WorkerID = "", ""
	if a.Budget != b.Budget || a.Concurrency != b.Concurrency || a.HTTPAddr != b.HTTPAddr ||
		a.TaskCheckInterval != b.TaskCheckInterval || a.ShutdownTimeout != b.ShutdownTimeout ||
		a.RedisURL != b.RedisURL || a.KeyPrefix != b.KeyPrefix || a.MaxRetry != b.MaxRetry ||
		a.HeartbeatInterval != b.HeartbeatInterval || a.LogLevel != b.LogLevel {
		t.Errorf("writing the documented defaults changes the config:\n%+v\n%+v", a, b)
	}
}

func TestRedisConnOpt(t *testing.T) {
	o, err := RedisConnOpt("rediss://:pw@redis.example:6380/2", []string{"n1:7000", "n2:7000"})
	if err != nil {
		t.Fatal(err)
	}
	co, ok := o.(asynq.RedisClusterClientOpt)
	if !ok || co.Password != "pw" || co.TLSConfig == nil || len(co.Addrs) != 2 {
		t.Errorf("cluster opt = %#v", o)
	}
	o, err = RedisConnOpt("redis-sentinel://:pw@s1:26379,s2:26379?master=mymaster", nil)
	if err != nil {
		t.Fatal(err)
	}
	if fo, ok := o.(asynq.RedisFailoverClientOpt); !ok || fo.MasterName != "mymaster" || len(fo.SentinelAddrs) != 2 {
		t.Errorf("sentinel opt = %#v", o)
	}
	if _, err := RedisConnOpt("redis://:secretpw@host:6379/notanumber", nil); err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("bad URL error = %v (must exist and hide the password)", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:80": true, "[::1]:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:8080": false, "[::]:1": false, "example.com:80": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
}

// A hash-tagged prefix is accepted on a cluster; without a cluster any prefix will do.
func TestClusterKeyPrefixAccepted(t *testing.T) {
	for _, e := range []map[string]string{
		{"LETTAQ_REDIS_CLUSTER_ADDRS": "n1:7000,n2:7000", "LETTAQ_KEY_PREFIX": "{lettaq}:"},
		{"LETTAQ_REDIS_CLUSTER_ADDRS": "n1:7000", "LETTAQ_KEY_PREFIX": "prod:{lq}:"},
		{"LETTAQ_KEY_PREFIX": "lettaq:"},
		{"LETTAQ_REDIS_CLUSTER_ADDRS": "n1:7000", "LETTAQ_DEV": "true"}, // dev mode uses its own Redis
	} {
		if _, err := ParseWorkerSettings(nil, env(e), nil); err != nil {
			t.Errorf("%v: %v", e, err)
		}
	}
}

// StartWorker and enqueue refuse the same configuration before they connect to anything.
func TestClusterKeyPrefixRefusedAtStart(t *testing.T) {
	cfg, err := ParseWorkerSettings(nil, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisClusterAddrs = []string{"127.0.0.1:1", "127.0.0.1:2"}
	_, err = StartWorker(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "LETTAQ_KEY_PREFIX") || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("StartWorker: %v, want a ConfigError about LETTAQ_KEY_PREFIX", err)
	}

	var out, errOut bytes.Buffer
	code := RunEnqueue(context.Background(), []string{"--agent", "agent-1", "hello"},
		env(map[string]string{"LETTAQ_REDIS_CLUSTER_ADDRS": "127.0.0.1:1,127.0.0.1:2", "LETTAQ_KEY_PREFIX": "lettaq:"}),
		nil, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "LETTAQ_KEY_PREFIX") || !strings.Contains(errOut.String(), "hash tag") {
		t.Errorf("enqueue: exit %d, stderr %q; want %d naming LETTAQ_KEY_PREFIX", code, errOut.String(), ExitUsage)
	}
	code = RunEnqueue(context.Background(), []string{"--key-prefix", "{lettaq}:", "--agent", "agent-1", "hello"},
		env(map[string]string{"LETTAQ_REDIS_CLUSTER_ADDRS": "127.0.0.1:1"}), nil, &out, &errOut)
	if code == ExitUsage {
		t.Errorf("enqueue with a hash-tagged prefix: exit %d (usage), stderr %q", code, errOut.String())
	}
}

func TestWorkerSettingsThreadMode(t *testing.T) {
	for raw, want := range map[string]queue.ThreadMode{"conversation": queue.ThreadConversation, "Default": queue.ThreadDefault, "agent": queue.ThreadAgent} {
		c, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_THREAD_MODE": raw}), nil)
		if err != nil || c.ThreadMode != want {
			t.Errorf("LETTAQ_THREAD_MODE=%s: %q %v", raw, c.ThreadMode, err)
		}
	}
	c, err := ParseWorkerSettings([]string{"--thread-mode=agent"}, env(map[string]string{"LETTAQ_THREAD_MODE": "default"}), nil)
	if err != nil || c.ThreadMode != queue.ThreadAgent {
		t.Errorf("flag: %q %v", c.ThreadMode, err)
	}
}

// TestShutdownTimeoutZeroRefused: LETTAQ_SHUTDOWN_TIMEOUT=0 was accepted and logged as 0s while
// the worker used its 10s default; it is refused, naming the variable and the least value.
func TestShutdownTimeoutZeroRefused(t *testing.T) {
	for _, raw := range []string{"0", "0s", "500ms"} {
		_, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_SHUTDOWN_TIMEOUT": raw}), nil)
		if err == nil || !strings.Contains(err.Error(), "LETTAQ_SHUTDOWN_TIMEOUT") || !strings.Contains(err.Error(), "at least 1s") {
			t.Errorf("LETTAQ_SHUTDOWN_TIMEOUT=%s: %v, want refused (at least 1s)", raw, err)
		}
	}
	c, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_SHUTDOWN_TIMEOUT": "1s"}), nil)
	if err != nil || c.ShutdownTimeout != time.Second {
		t.Errorf("LETTAQ_SHUTDOWN_TIMEOUT=1s: %v %v", c.ShutdownTimeout, err)
	}
}

// TestApprovalTimeoutBounded: an LETTAQ_APPROVAL_TIMEOUT near the largest duration made the
// approval keys' TTL negative (no expiry); it is refused past 366 days, naming the variable.
func TestApprovalTimeoutBounded(t *testing.T) {
	for _, raw := range []string{"2562047h", "8785h"} {
		_, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_APPROVAL_TIMEOUT": raw}), nil)
		if err == nil || !strings.Contains(err.Error(), "LETTAQ_APPROVAL_TIMEOUT") || !strings.Contains(err.Error(), "at most") {
			t.Errorf("LETTAQ_APPROVAL_TIMEOUT=%s: %v, want refused (at most 366 days)", raw, err)
		}
	}
	if c, err := ParseWorkerSettings(nil, env(map[string]string{"LETTAQ_APPROVAL_TIMEOUT": "8784h"}), nil); err != nil || c.ApprovalTimeout != 8784*time.Hour {
		t.Errorf("LETTAQ_APPROVAL_TIMEOUT=8784h: %v %v", c.ApprovalTimeout, err)
	}
}
