package deploytest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lettaq/lettaq/internal/app"
)

// composeVar is compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, and the
// required forms ${VAR:?message} and ${VAR?message}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*)|(:?\?)([^}]*))?\}`)

// resolveCompose fills in compose's interpolation of env as `docker compose` would with the
// variables in set (and no others) in its environment.
func resolveCompose(t *testing.T, env map[string]string, set map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, val := range env {
		out[name] = composeVar.ReplaceAllStringFunc(val, func(m string) string {
			sm := composeVar.FindStringSubmatch(m)
			v, ok := set[sm[1]]
			switch {
			case sm[4] != "" && (!ok || v == "" && sm[4] == ":?"):
				t.Errorf("%s: %s is required by compose (%s): every docker compose command would fail without it", name, sm[1], m)
			case sm[2] == ":-" && v == "", sm[2] == "-" && !ok:
				return sm[3]
			}
			return v
		})
	}
	return out
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	var c compose
	if err := yaml.Unmarshal(repoFile(t, "docker-compose.yaml"), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// `docker compose ps/logs/down` interpolate the whole file too: a required variable (${VAR:?…})
// makes them fail when it is unset. Only a starting worker may insist on its token.
func TestComposeRequiresNoVariable(t *testing.T) {
	for _, m := range composeVar.FindAllStringSubmatch(string(repoFile(t, "docker-compose.yaml")), -1) {
		if m[4] != "" {
			t.Errorf("%s: a required variable breaks docker compose ps/logs/down when unset; "+
				"use ${%s:-} and let the worker refuse to start", m[0], m[1])
		}
	}
}

// The image is distroless (no shell, no wget): the healthcheck runs the worker binary, whose
// healthcheck subcommand asks its own /readyz with the token.
func TestComposeHealthcheckRunsTheWorker(t *testing.T) {
	w := loadCompose(t).Services["worker"]
	hc := w.Healthcheck.Test
	entry := regexp.MustCompile(`(?m)^ENTRYPOINT \["([^"]+)"\]`).FindStringSubmatch(string(repoFile(t, "Dockerfile")))
	if entry == nil {
		t.Fatal("Dockerfile has no exec-form ENTRYPOINT")
	}
	if len(hc) < 3 || hc[0] != "CMD" || hc[1] != entry[1] || hc[2] != "healthcheck" {
		t.Fatalf("worker healthcheck test = %q, want [CMD %s healthcheck] (exec form: the image has no shell)", hc, entry[1])
	}
	if to, err := time.ParseDuration(w.Healthcheck.Timeout); err != nil || to <= 3*time.Second {
		t.Errorf("healthcheck timeout %q must be above the subcommand's own 3s, so its message is kept", w.Healthcheck.Timeout)
	}
	if m := regexp.MustCompile(`\b(wget|curl|/bin/sh|CMD-SHELL)\b`).FindString(string(repoFile(t, "docker-compose.yaml"))); m != "" {
		t.Errorf("docker-compose.yaml uses %s, which the distroless image lacks", m)
	}

	// Run the healthcheck's exact arguments with the container's environment, against a
	// listener that wants the token (the address is the only thing changed).
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || r.Header.Get("Authorization") != "Bearer a-token" {
			http.Error(rw, "no", http.StatusUnauthorized)
			return
		}
		_, _ = rw.Write([]byte(`{"redis":"ok","worker":"ok"}`))
	}))
	defer ts.Close()
	cenv := resolveCompose(t, w.Environment, map[string]string{"LETTAQ_HTTP_TOKEN": "a-token"})
	cenv["LETTAQ_HTTP_ADDR"] = ts.Listener.Addr().String()
	var out, errOut strings.Builder
	if code := app.RunWorker(context.Background(), hc[2:], func(k string) string { return cenv[k] }, &out, &errOut); code != 0 {
		t.Errorf("worker %s: exit %d, stderr %q", strings.Join(hc[2:], " "), code, errOut.String())
	}
}

// Docker's .dockerignore: patterns relative to the context root, * and ? within a path
// element, ** across elements, a leading ! re-includes; a pattern that matches a directory
// excludes what is under it. The last matching pattern wins.
func dockerignored(patterns []string, path string) bool {
	excluded := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(strings.TrimPrefix(p, "!"))), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(p); i++ {
			switch c := p[i]; {
			case c == '*' && i+1 < len(p) && p[i+1] == '*':
				i++
				if i+1 < len(p) && p[i+1] == '/' {
					i++
					re.WriteString("(.*/)?")
				} else {
					re.WriteString(".*")
				}
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("(/.*)?$")
		if regexp.MustCompile(re.String()).MatchString(path) {
			excluded = !neg
		}
	}
	return excluded
}

func TestDockerignore(t *testing.T) {
	var patterns []string
	for _, l := range strings.Split(string(repoFile(t, ".dockerignore")), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	// The matcher itself.
	for path, want := range map[string]bool{".git/config": true, "cmd/worker": false, "worker": true,
		"a/b/testdata/x": true, ".env": true, ".env.local": true} {
		if got := dockerignored(patterns, path); got != want {
			t.Errorf("%s ignored = %v, want %v", path, got, want)
		}
	}
	for _, must := range []string{".git", ".env", "bin"} {
		if !dockerignored(patterns, must) {
			t.Errorf(".dockerignore does not exclude %s", must)
		}
	}
	// Everything the image's go build needs stays in the context: go.mod, go.sum and every
	// package of this module that the two commands import.
	for _, f := range []string{"go.mod", "go.sum"} {
		if dockerignored(patterns, f) {
			t.Errorf(".dockerignore excludes %s", f)
		}
	}
	_, here, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(here), "..", "..")
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}{{end}}", "./cmd/worker", "./cmd/enqueue", "./cmd/relay")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	absRoot, _ := filepath.Abs(root)
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		rel, err := filepath.Rel(absRoot, fields[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields[1:] {
			n++
			if p := filepath.ToSlash(filepath.Join(rel, f)); dockerignored(patterns, p) {
				t.Errorf(".dockerignore excludes %s, which the image's build needs", p)
			}
		}
	}
	if n < 10 {
		t.Errorf("go list found only %d source files: %s", n, out)
	}
}

// The builder image's Go is the one go.mod asks for: golang images set GOTOOLCHAIN=local, so an
// older Go refuses to build.
func TestDockerfileGoMatchesGoMod(t *testing.T) {
	mod := string(repoFile(t, "go.mod"))
	want := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(mod)
	if want == nil {
		t.Fatal("go.mod has no go line")
	}
	version := want[1]
	if tc := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindStringSubmatch(mod); tc != nil {
		version = tc[1]
	}
	from := regexp.MustCompile(`(?m)^FROM golang:([^\s@]+)`).FindStringSubmatch(string(repoFile(t, "Dockerfile")))
	if from == nil {
		t.Fatal("Dockerfile does not build FROM golang:<version>")
	}
	if tag, _, _ := strings.Cut(from[1], "-"); tag != version {
		t.Errorf("Dockerfile builds with golang:%s, go.mod wants go %s: pin golang:%s", from[1], version, version)
	}
}

// .env.example documents the variables compose reads, and .env (with the token) stays out of
// git and of the image.
func TestEnvExample(t *testing.T) {
	used := map[string]bool{}
	for _, m := range composeVar.FindAllStringSubmatch(string(repoFile(t, "docker-compose.yaml")), -1) {
		used[m[1]] = true
	}
	listed := map[string]bool{}
	for _, l := range strings.Split(string(repoFile(t, ".env.example")), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, _, ok := strings.Cut(l, "=")
		if !ok {
			t.Errorf(".env.example: %q is not NAME=value", l)
			continue
		}
		listed[name] = true
		if !used[name] {
			t.Errorf(".env.example sets %s, which docker-compose.yaml does not read", name)
		}
	}
	if !listed["LETTAQ_HTTP_TOKEN"] {
		t.Error(".env.example lacks LETTAQ_HTTP_TOKEN, the one variable the worker needs under compose")
	}
	if !regexp.MustCompile(`(?m)^/?\.env$`).Match(repoFile(t, ".gitignore")) {
		t.Error(".gitignore does not keep .env (it holds the token) out of git")
	}
}
