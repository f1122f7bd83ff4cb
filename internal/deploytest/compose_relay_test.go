package deploytest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/lettaq/lettaq/internal/app"
)

// relayService is what TestComposeRelay reads of the relay's service.
type relayService struct {
	Build       any               `yaml:"build"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Profiles    []string          `yaml:"profiles"`
	Environment map[string]string `yaml:"environment"`
	Expose      []string          `yaml:"expose"`
	Ports       []string          `yaml:"ports"`
	Restart     string            `yaml:"restart"`
	Deploy      struct {
		Replicas int `yaml:"replicas"`
	} `yaml:"deploy"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck struct {
		Test    []string `yaml:"test"`
		Timeout string   `yaml:"timeout"`
	} `yaml:"healthcheck"`
}

// The relay runs as two replicas of the image's relay binary, with a health check of its own
// /readyz, only variables the relay reads (which it accepts once the token and the fake
// platform's URL are given, and refuses naming them when not), and a loopback port range
// apart from the workers'.
func TestComposeRelay(t *testing.T) {
	var c struct {
		Services map[string]relayService `yaml:"services"`
	}
	if err := yaml.Unmarshal(repoFile(t, "docker-compose.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	r, ok := c.Services["relay"]
	if !ok {
		t.Fatal("docker-compose.yaml has no relay service")
	}
	if r.Build == nil || strings.Join(r.Entrypoint, " ") != "/usr/local/bin/relay" {
		t.Errorf("relay: build %v entrypoint %q; want the image's /usr/local/bin/relay", r.Build, r.Entrypoint)
	}
	if !regexp.MustCompile(`(?m)^COPY --from=build .*/out/relay\b`).Match(repoFile(t, "Dockerfile")) ||
		!strings.Contains(string(repoFile(t, "Dockerfile")), "./cmd/relay") {
		t.Error("the Dockerfile does not build ./cmd/relay into /usr/local/bin/relay")
	}
	if r.Deploy.Replicas != 2 {
		t.Errorf("relay replicas = %d, want 2 (they share the chats and take over a dead one's)", r.Deploy.Replicas)
	}
	if d := r.DependsOn["redis"]; d.Condition != "service_healthy" {
		t.Errorf("relay depends_on redis = %+v, want service_healthy", d)
	}
	if r.Restart != "unless-stopped" {
		t.Errorf("relay restart %q, want unless-stopped", r.Restart)
	}
	// Its health check: an exec-form command of the image (no shell) that GETs the relay's
	// /readyz on LETTAQ_HTTP_ADDR with the token (worker healthcheck reads only those two).
	hc := r.Healthcheck.Test
	if len(hc) != 3 || hc[0] != "CMD" || hc[1] != "/usr/local/bin/worker" || hc[2] != "healthcheck" {
		t.Errorf("relay healthcheck %q, want [CMD /usr/local/bin/worker healthcheck]", hc)
	}
	// Run that command as the container would, against a relay's /readyz that wants the token.
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/readyz" || req.Header.Get("Authorization") != "Bearer a-token" {
			http.Error(rw, "no", http.StatusUnauthorized)
			return
		}
		_, _ = rw.Write([]byte(`{"redis":"ok","worker":"ok"}`))
	}))
	defer ts.Close()
	cenv := resolveCompose(t, r.Environment, map[string]string{"LETTAQ_HTTP_TOKEN": "a-token"})
	cenv["LETTAQ_HTTP_ADDR"] = ts.Listener.Addr().String()
	var out, errOut strings.Builder
	if len(hc) == 3 {
		if code := app.RunWorker(context.Background(), hc[2:], func(k string) string { return cenv[k] }, &out, &errOut); code != 0 {
			t.Errorf("relay healthcheck %q in the relay's environment: exit %d, stderr %q", hc, code, errOut.String())
		}
	}
	known := map[string]bool{}
	for _, v := range app.RelayVars() {
		known[v.Name] = true
	}
	for name := range r.Environment {
		if !known[name] {
			t.Errorf("compose sets %s for the relay, which it does not read", name)
		}
	}
	parse := func(set map[string]string) error {
		env := resolveCompose(t, r.Environment, set)
		_, err := app.ParseRelaySettings(nil, func(k string) string { return env[k] }, nil)
		return err
	}
	if err := parse(map[string]string{"LETTAQ_HTTP_TOKEN": "a-token", "LETTAQ_RELAY_FAKE_URL": "http://fake:9000"}); err != nil {
		t.Errorf("the relay rejects compose's environment: %v", err)
	}
	if err := parse(map[string]string{"LETTAQ_HTTP_TOKEN": "a-token"}); err == nil || !strings.Contains(err.Error(), "LETTAQ_RELAY_FAKE_URL") {
		t.Errorf("without an adapter the relay must refuse to start naming LETTAQ_RELAY_FAKE_URL; got %v", err)
	}
	if err := parse(map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://fake:9000"}); err == nil || !strings.Contains(err.Error(), "LETTAQ_HTTP_TOKEN") {
		t.Errorf("without a token the relay must refuse to start naming LETTAQ_HTTP_TOKEN; got %v", err)
	}
	// Until the relay has an adapter that needs no URL, it is opt-in: a plain `docker compose
	// up` must not start replicas that exit 2 in a loop.
	if r.Environment["LETTAQ_RELAY_FAKE_URL"] != "" && !strings.Contains(r.Environment["LETTAQ_RELAY_FAKE_URL"], "${") {
		t.Errorf("LETTAQ_RELAY_FAKE_URL is fixed in compose: %q", r.Environment["LETTAQ_RELAY_FAKE_URL"])
	}
	if len(r.Profiles) == 0 {
		t.Error("the relay needs LETTAQ_RELAY_FAKE_URL to start: keep it behind a profile until its adapters need none")
	}
	// The listener: on all interfaces inside the container, exposed, and published on the
	// host's loopback as a range that does not meet the workers'.
	addr := r.Environment["LETTAQ_HTTP_ADDR"]
	_, port, _ := strings.Cut(addr, ":")
	if app.IsLoopback(addr) || len(r.Expose) != 1 || r.Expose[0] != port {
		t.Errorf("relay LETTAQ_HTTP_ADDR %q, expose %v: want all interfaces, its port exposed", addr, r.Expose)
	}
	ranges := func(ps []string) [][2]int {
		var out [][2]int
		for _, p := range ps {
			m := regexp.MustCompile(`^127\.0\.0\.1:([0-9]+)-([0-9]+):([0-9]+)$`).FindStringSubmatch(p)
			if m == nil {
				t.Errorf("port %q: want 127.0.0.1:<first>-<last>:<container port>", p)
				continue
			}
			lo, _ := strconv.Atoi(m[1])
			hi, _ := strconv.Atoi(m[2])
			out = append(out, [2]int{lo, hi})
		}
		return out
	}
	w := c.Services["worker"]
	for _, rr := range ranges(r.Ports) {
		if rr[1]-rr[0]+1 < r.Deploy.Replicas {
			t.Errorf("relay port range %v holds fewer ports than its %d replicas", rr, r.Deploy.Replicas)
		}
		for _, wr := range ranges(w.Ports) {
			if rr[0] <= wr[1] && wr[0] <= rr[1] {
				t.Errorf("relay port range %v meets the workers' %v", rr, wr)
			}
		}
	}
	for _, p := range r.Ports {
		if !strings.HasSuffix(p, ":"+port) {
			t.Errorf("relay port %q does not publish LETTAQ_HTTP_ADDR's port %s", p, port)
		}
	}
}
