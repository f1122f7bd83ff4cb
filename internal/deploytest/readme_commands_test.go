package deploytest

import (
	"regexp"
	"strings"
	"testing"
)

// README tells how to build the commands, says why (go run's exit code), and the examples
// that look at exit codes, in README and docs/, use the built commands.
func TestReadmeBuiltCommandsForExitCodes(t *testing.T) {
	readme := string(repoFile(t, "README.md"))
	cmds := section(t, "README.md", readme, "## The commands")
	for _, want := range []string{"go build -o bin/ ./cmd/...", "go install ./cmd/...", "exit status 2"} {
		if !strings.Contains(cmds, want) {
			t.Errorf("README's The commands does not say %q", want)
		}
	}
	for name, text := range markdownFiles(t) {
		blocks := regexp.MustCompile("(?s)```(?:sh|bash)?\n(.*?)```").FindAllStringSubmatch(text, -1)
		scripts := 0
		for _, b := range blocks {
			if !regexp.MustCompile(`\$\?|\|\||&&\s*(bin/)?(enqueue|worker)|exit code`).MatchString(b[1]) {
				continue
			}
			if strings.Contains(b[1], "go run ./cmd/") {
				t.Errorf("an example in %s that acts on exit codes uses go run (which exits 1 for every failure):\n%s", name, b[1])
			}
			if strings.Contains(b[1], "bin/enqueue") || strings.Contains(b[1], "bin/worker") {
				scripts++
			}
		}
		if scripts == 0 && (name == "README.md" || name == "docs/commands.md") {
			t.Errorf("%s has no script example using the built enqueue (bin/enqueue) and its exit code", name)
		}
	}
	// The documented healthcheck is the subcommand the worker has.
	for _, name := range []string{"README.md", "docs/commands.md"} {
		if !strings.Contains(string(repoFile(t, name)), "`worker healthcheck`") {
			t.Errorf("%s does not document worker healthcheck", name)
		}
	}
}
