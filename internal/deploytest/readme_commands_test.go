package deploytest

import (
	"regexp"
	"strings"
	"testing"
)

// README tells how to build the commands, says why (go run's exit code), and its examples that
// look at exit codes use the built commands.
func TestReadmeBuiltCommandsForExitCodes(t *testing.T) {
	readme := string(repoFile(t, "README.md"))
	cmds := readmeSection(t, readme, "## The commands")
	for _, want := range []string{"go build -o bin/ ./cmd/...", "go install ./cmd/...", "exit status 2"} {
		if !strings.Contains(cmds, want) {
			t.Errorf("README's The commands does not say %q", want)
		}
	}
	blocks := regexp.MustCompile("(?s)```(?:sh|bash)?\n(.*?)```").FindAllStringSubmatch(readme, -1)
	scripts := 0
	for _, b := range blocks {
		if !regexp.MustCompile(`\$\?|\|\||&&\s*(bin/)?(enqueue|worker)|exit code`).MatchString(b[1]) {
			continue
		}
		if strings.Contains(b[1], "go run ./cmd/") {
			t.Errorf("a README example that acts on exit codes uses go run (which exits 1 for every failure):\n%s", b[1])
		}
		if strings.Contains(b[1], "bin/enqueue") || strings.Contains(b[1], "bin/worker") {
			scripts++
		}
	}
	if scripts == 0 {
		t.Error("README has no script example using the built enqueue (bin/enqueue) and its exit code")
	}
	// The documented healthcheck is the subcommand the worker has.
	if !strings.Contains(readme, "`worker healthcheck`") {
		t.Error("README does not document worker healthcheck")
	}
}
