package deploytest

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lettaq/lettaq/internal/app"
)

// deployService is what TestComposeDeployable reads of a compose service.
type deployService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Restart     string            `yaml:"restart"`
	Profiles    []string          `yaml:"profiles"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
		Required  *bool  `yaml:"required"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test        []string `yaml:"test"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
}

func loadDeployCompose(t *testing.T) map[string]deployService {
	t.Helper()
	var c struct {
		Services map[string]deployService `yaml:"services"`
	}
	if err := yaml.Unmarshal(repoFile(t, "docker-compose.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	return c.Services
}

// Redis has a memory limit for its noeviction policy to act on: without --maxmemory, Redis
// never refuses a write and grows until the kernel kills it (the policy is then a no-op).
func TestComposeRedisHasMaxmemory(t *testing.T) {
	cmd := loadDeployCompose(t)["redis"].Command
	flags := map[string]string{}
	for i := 0; i+1 < len(cmd); i++ {
		if strings.HasPrefix(cmd[i], "--") {
			flags[cmd[i]] = cmd[i+1]
		}
	}
	if flags["--maxmemory-policy"] != "noeviction" {
		t.Errorf("redis --maxmemory-policy = %q, want noeviction", flags["--maxmemory-policy"])
	}
	m := regexp.MustCompile(`^([1-9][0-9]*)(b|kb|mb|gb)$`).FindStringSubmatch(strings.ToLower(flags["--maxmemory"]))
	if m == nil {
		t.Fatalf("redis --maxmemory = %q: want a size such as 1gb (0 or none means no limit, and noeviction never acts)", flags["--maxmemory"])
	}
	if n, _ := strconv.Atoi(m[1]); m[2] == "b" || m[2] == "kb" || (m[2] == "mb" && n < 64) {
		t.Errorf("redis --maxmemory %s is too small for a queue", flags["--maxmemory"])
	}
}

// The Letta server is a pinned version (latest changes under a deployment: Letta's later images
// serve another protocol), with a health check that the worker waits for when the letta profile
// runs it (required: false, so the worker also starts without that profile).
func TestComposeLettaPinnedAndWaitedFor(t *testing.T) {
	s := loadDeployCompose(t)
	l := s["letta"]
	_, tag, ok := strings.Cut(strings.TrimPrefix(l.Image, "letta/letta"), ":")
	if !strings.HasPrefix(l.Image, "letta/letta:") || !ok || !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(tag) {
		t.Errorf("letta image %q: want letta/letta:<version>, not latest or no tag", l.Image)
	}
	if len(l.Healthcheck.Test) < 2 || l.Healthcheck.Test[0] != "CMD" || !strings.Contains(strings.Join(l.Healthcheck.Test, " "), "/v1/health/") {
		t.Errorf("letta healthcheck %q: want an exec-form check of GET /v1/health/", l.Healthcheck.Test)
	}
	if l.Healthcheck.StartPeriod == "" {
		t.Error("letta healthcheck has no start_period (the server migrates its database first)")
	}
	w := s["worker"]
	if d, ok := w.DependsOn["letta"]; !ok || d.Condition != "service_healthy" || d.Required == nil || *d.Required {
		t.Errorf("worker depends_on letta = %+v (present %v): want condition service_healthy, required false", d, ok)
	}
	if d := w.DependsOn["redis"]; d.Condition != "service_healthy" {
		t.Errorf("worker depends_on redis = %+v, want service_healthy", d)
	}
}

// The monitor is reachable from the host, on loopback only: the worker's port is published on
// 127.0.0.1 as a range, so that --scale worker=N still has a port for each.
func TestComposeMonitorOnLoopback(t *testing.T) {
	w := loadDeployCompose(t)["worker"]
	_, port, _ := strings.Cut(w.Environment["LETTAQ_HTTP_ADDR"], ":")
	if len(w.Ports) == 0 {
		t.Fatal("worker publishes no port: the monitor is unreachable from the host")
	}
	for _, p := range w.Ports {
		m := regexp.MustCompile(`^127\.0\.0\.1:([0-9]+)-([0-9]+):([0-9]+)$`).FindStringSubmatch(p)
		if m == nil {
			t.Errorf("worker port %q: want 127.0.0.1:<first>-<last>:<container port> (loopback only, a range for --scale)", p)
			continue
		}
		if m[3] != port {
			t.Errorf("worker port %q does not publish LETTAQ_HTTP_ADDR's port %s", p, port)
		}
		if lo, _ := strconv.Atoi(m[1]); lo >= func() int { n, _ := strconv.Atoi(m[2]); return n }() {
			t.Errorf("worker port %q: an empty or one-port range collides under --scale", p)
		}
	}
	if !strings.Contains(w.Environment["LETTAQ_HTTP_TOKEN"], "${LETTAQ_HTTP_TOKEN") ||
		!regexp.MustCompile(`(?m)^LETTAQ_HTTP_TOKEN=`).Match(repoFile(t, ".env.example")) {
		t.Error("the monitor's token must come from the env file (.env, made from .env.example)")
	}
}

// A worker without its token fails once, with the message, instead of restarting in a loop:
// Docker's restart policies cannot skip an exit code, so a one-shot config-check service (the
// same image and environment, restart "no") runs `worker check-config`, and the worker starts
// only when it completed successfully.
func TestComposeConfigCheckedOnce(t *testing.T) {
	s := loadDeployCompose(t)
	w, c := s["worker"], s["config-check"]
	if d := w.DependsOn["config-check"]; d.Condition != "service_completed_successfully" {
		t.Fatalf("worker depends_on config-check = %+v, want service_completed_successfully", d)
	}
	if strings.Join(c.Command, " ") != "check-config" || (c.Restart != "" && c.Restart != "no") {
		t.Errorf("config-check: command %q restart %q; want [check-config] and no restart", c.Command, c.Restart)
	}
	if len(c.Environment) != len(w.Environment) {
		t.Errorf("config-check's environment differs from the worker's:\n%v\n%v", c.Environment, w.Environment)
	}
	for k, v := range w.Environment {
		if c.Environment[k] != v {
			t.Errorf("config-check %s = %q, worker's = %q", k, c.Environment[k], v)
		}
	}
	// Its exact arguments, with compose's environment: exit 2 and the message without a token,
	// 0 with one.
	run := func(set map[string]string) (int, string) {
		cenv := resolveCompose(t, c.Environment, set)
		var out, errOut strings.Builder
		code := app.RunWorker(context.Background(), c.Command, func(k string) string { return cenv[k] }, &out, &errOut)
		return code, errOut.String()
	}
	if code, msg := run(nil); code != app.ExitUsage || !strings.Contains(msg, "LETTAQ_HTTP_TOKEN") {
		t.Errorf("without a token: exit %d, stderr %q; want %d naming LETTAQ_HTTP_TOKEN", code, msg, app.ExitUsage)
	}
	if code, msg := run(map[string]string{"LETTAQ_HTTP_TOKEN": "a-token"}); code != app.ExitOK {
		t.Errorf("with a token: exit %d, stderr %q", code, msg)
	}
}
