// Package deploytest checks the deployment files and the documentation against the code:
// docker-compose.yaml may only set variables the worker reads, the Dockerfile builds the
// commands that exist, docs/configuration.md documents every variable, and README.md stays a
// front door whose links resolve.
package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lettaq/lettaq/internal/app"
	"github.com/lettaq/lettaq/internal/envvar"
)

func repoFile(t *testing.T, name string) []byte {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       any               `yaml:"build"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Expose      []string          `yaml:"expose"`
		Profiles    []string          `yaml:"profiles"`
		StopGrace   string            `yaml:"stop_grace_period"`
		MemLimit    string            `yaml:"mem_limit"`
		Healthcheck struct {
			Test    []string `yaml:"test"`
			Timeout string   `yaml:"timeout"`
		} `yaml:"healthcheck"`
	} `yaml:"services"`
}

func workerVars() map[string]envvar.Var {
	m := map[string]envvar.Var{}
	for _, v := range app.WorkerVars() {
		m[v.Name] = v
	}
	return m
}

func TestComposeMatchesWorker(t *testing.T) {
	var c compose
	if err := yaml.Unmarshal(repoFile(t, "docker-compose.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	redis, ok := c.Services["redis"]
	if !ok || !strings.HasPrefix(redis.Image, "redis:7") {
		t.Fatalf("redis service: %+v", redis)
	}
	cmd := strings.Join(redis.Command, " ")
	for _, want := range []string{"--appendonly yes", "--maxmemory-policy noeviction"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("redis command %q lacks %q", cmd, want)
		}
	}
	w, ok := c.Services["worker"]
	if !ok || w.Build == nil {
		t.Fatalf("worker service must be built from the Dockerfile: %+v", w)
	}
	// Its published ports (a loopback range, so that --scale works): TestComposeMonitorOnLoopback.
	known := workerVars()
	for name, val := range w.Environment {
		if _, ok := known[name]; !ok {
			t.Errorf("compose sets %s, which the worker does not read", name)
		}
		_ = val
	}
	// The values, with compose's ${VAR:-default} filled in (the variables unset), are what the
	// worker gets: valid, except that it refuses to start without a token.
	resolved := resolveCompose(t, w.Environment, nil)
	_, err := app.ParseWorkerSettings(nil, func(k string) string { return resolved[k] }, nil)
	if err == nil || !strings.Contains(err.Error(), "LETTAQ_HTTP_TOKEN") || !strings.Contains(err.Error(), ".env.example") {
		t.Errorf("without LETTAQ_HTTP_TOKEN the worker must refuse to start naming it; got %v", err)
	}
	withToken := resolveCompose(t, w.Environment, map[string]string{"LETTAQ_HTTP_TOKEN": "a-token"})
	if _, err := app.ParseWorkerSettings(nil, func(k string) string { return withToken[k] }, nil); err != nil {
		t.Errorf("the worker rejects compose's environment: %v", err)
	}
	addr := w.Environment["LETTAQ_HTTP_ADDR"]
	if app.IsLoopback(addr) {
		t.Errorf("LETTAQ_HTTP_ADDR %q is loopback: unreachable from outside the container", addr)
	}
	if !strings.Contains(w.Environment["LETTAQ_HTTP_TOKEN"], "${LETTAQ_HTTP_TOKEN") {
		t.Errorf("LETTAQ_HTTP_TOKEN must come from the environment or .env: %q", w.Environment["LETTAQ_HTTP_TOKEN"])
	}
	if w.MemLimit == "" {
		t.Error("worker has no mem_limit (README recommends one: the worker sets its GC limit from it)")
	} else if !regexp.MustCompile(`^[1-9][0-9]*(b|k|kb|m|mb|g|gb)$`).MatchString(strings.ToLower(w.MemLimit)) {
		t.Errorf("mem_limit %q is not a compose byte size", w.MemLimit)
	}
	if !strings.Contains(w.Environment["LETTA_BASE_URL"], "http://letta:8283") {
		t.Errorf("LETTA_BASE_URL default should be http://letta:8283: %q", w.Environment["LETTA_BASE_URL"])
	}
	if w.Environment["REDIS_URL"] != "redis://redis:6379/0" {
		t.Errorf("REDIS_URL = %q", w.Environment["REDIS_URL"])
	}
	// The listener's port is the one exposed.
	if _, port, _ := strings.Cut(addr, ":"); len(w.Expose) != 1 || w.Expose[0] != port {
		t.Errorf("expose %v does not match LETTAQ_HTTP_ADDR %q", w.Expose, addr)
	}
	if w.StopGrace == "" {
		t.Error("worker needs a stop_grace_period longer than LETTAQ_SHUTDOWN_TIMEOUT")
	}
	letta, ok := c.Services["letta"]
	if !ok || !strings.HasPrefix(letta.Image, "letta/letta") || len(letta.Profiles) == 0 {
		t.Errorf("letta service should be letta/letta behind a profile: %+v", letta)
	}
}

func TestDockerfileBuildsTheCommands(t *testing.T) {
	df := string(repoFile(t, "Dockerfile"))
	for _, cmd := range []string{"./cmd/worker", "./cmd/enqueue"} {
		if !strings.Contains(df, cmd) {
			t.Errorf("Dockerfile does not build %s", cmd)
		}
	}
}

// Every variable the worker (and enqueue) reads is in docs/configuration.md, with its default.
func TestDocsListEveryVariable(t *testing.T) {
	conf := string(repoFile(t, "docs/configuration.md"))
	for _, v := range append(app.WorkerVars(), app.EnqueueVars...) {
		def := v.Default
		if v.Secret || def == "" {
			def = ""
		}
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(v.Name) + "`[^\n]*\\|")
		line := row.FindString(conf)
		if line == "" {
			t.Errorf("docs/configuration.md has no table row for %s", v.Name)
			continue
		}
		if def != "" && !strings.Contains(line, "`"+def+"`") {
			t.Errorf("docs/configuration.md row for %s does not give its default `%s`: %s", v.Name, def, line)
		}
	}
	if readme := string(repoFile(t, "README.md")); !strings.Contains(readme, "go vet ./... && go test -race ./...") {
		t.Error("README.md lost the test command that .ci/run runs")
	}
}

// TestGenerateConfigTable prints the configuration table for docs/configuration.md:
// LETTAQ_PRINT_TABLE=1 go test ./internal/deploytest -run TestGenerateConfigTable -v
func TestGenerateConfigTable(t *testing.T) {
	if os.Getenv("LETTAQ_PRINT_TABLE") == "" {
		t.Skip("set LETTAQ_PRINT_TABLE=1 to print")
	}
	t.Log("\n" + app.VarsTable(app.WorkerVars()))
	t.Log("\n" + defaultBudgetJSON(t))
}
