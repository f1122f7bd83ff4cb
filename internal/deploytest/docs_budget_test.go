package deploytest

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/app"
	"github.com/lettaq/lettaq/queue"
)

// defaultBudgetJSON is GET /budget's answer for a worker with every default.
func defaultBudgetJSON(t *testing.T) string {
	t.Helper()
	cfg, err := app.ParseWorkerSettings(nil, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(app.NewBudgetInfo(cfg), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of the section of doc (a Markdown file's text, named name in
// errors) with this heading, up to the next heading of the same or a higher level.
func section(t *testing.T, name, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no section %q", name, heading)
	}
	level := heading[:strings.Index(heading, " ")+1]
	rest := doc[i+len(heading)+2:]
	for _, h := range regexp.MustCompile(`(?m)^#+ `).FindAllStringIndex(rest, -1) {
		if l := rest[h[0]:h[1]]; len(l) <= len(level) {
			return rest[:h[0]]
		}
	}
	return rest
}

// Every figure the documentation states about the task timeout comes from the budget
// package: the formulas with their parts, the totals, and the example answer of GET /budget.
func TestDocsBudgetFigures(t *testing.T) {
	def := budget.Default()
	never := def
	never.ResendPolicy = budget.ResendNever

	// The formula of the defaults, both resend policies, term by term.
	agent := string(repoFile(t, "docs/agent-client.md"))
	budgetSection := section(t, "docs/agent-client.md", agent, "## The time budget of a turn")
	for _, c := range []budget.Config{def, never} {
		if f := app.BudgetFormula(c); !strings.Contains(budgetSection, f) {
			t.Errorf("docs/agent-client.md's time budget section does not state\n\t%s", f)
		}
	}
	// No other task timeout figure anywhere: whole seconds of three digits or more ("1230s")
	// and minutes-and-seconds of ten minutes or more ("32m40s") are only ever the totals.
	allowed := map[time.Duration]bool{def.TaskTimeout(): true, never.TaskTimeout(): true}
	for name, text := range markdownFiles(t) {
		for _, m := range regexp.MustCompile(`(^|[^\d.])(\d{3,}s|\d{2,}m\d+s)\b`).FindAllStringSubmatch(text, -1) {
			d, err := time.ParseDuration(m[2])
			if err != nil || !allowed[d] {
				t.Errorf("%s states %s, which is not a task timeout of the defaults (%v, or %v with LETTAQ_RESEND_POLICY=never)",
					name, m[2], def.TaskTimeout(), never.TaskTimeout())
			}
		}
	}

	// Producers in other languages are told the figure and where to ask for it.
	const enqName = "docs/enqueue-from-other-languages.md"
	enq := string(repoFile(t, enqName))
	secs := strconv.FormatInt(int64(def.TaskTimeout()/time.Second), 10)
	for _, want := range []string{"GET /budget", "task_timeout_seconds", secs + " with the defaults",
		"max retry " + strconv.Itoa(queue.TaskMaxRetry(queue.DefaultMaxRetry)), "retention " + strconv.Itoa(int(queue.DefaultRetention/time.Hour)) + "h"} {
		if !strings.Contains(enq, want) {
			t.Errorf("%s does not say %q", enqName, want)
		}
	}
	// Its example of GET /budget is the real answer of a worker with the defaults.
	block := regexp.MustCompile("(?s)```json\n(\\{\n  \"task_type\".*?\n\\})\n```").FindStringSubmatch(enq)
	if block == nil {
		t.Fatalf("%s has no example of GET /budget (a json block starting with task_type); it is:\n%s", enqName, defaultBudgetJSON(t))
	}
	var got, want any
	if err := json.Unmarshal([]byte(block[1]), &got); err != nil {
		t.Fatalf("%s's /budget example: %v", enqName, err)
	}
	if err := json.Unmarshal([]byte(defaultBudgetJSON(t)), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s's /budget example differs from the defaults' answer; it should read:\n%s", enqName, defaultBudgetJSON(t))
	}
	// The README's short version sends producers there, and to GET /budget.
	readme := string(repoFile(t, "README.md"))
	short := section(t, "README.md", readme, "## Enqueue from another language")
	for _, want := range []string{"GET /budget", "(" + enqName + ")"} {
		if !strings.Contains(short, want) {
			t.Errorf("README's Enqueue from another language does not say %q", want)
		}
	}
}
