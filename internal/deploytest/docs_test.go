package deploytest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines keeps README.md a front door: what lettaq is, how to try, test and deploy
// it, and links; the rest is in docs/.
const maxReadmeLines = 300

// repoRoot is the repository's root folder.
func repoRoot() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..")
}

// markdownFiles returns README.md and every docs/*.md, by their path in the repository.
func markdownFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{"README.md": string(repoFile(t, "README.md"))}
	names, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		rel := "docs/" + filepath.Base(n)
		files[rel] = string(repoFile(t, rel))
	}
	return files
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fence     = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchor is the id GitHub gives a heading: lower case, punctuation dropped, spaces as '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ' || r == '-':
			b.WriteRune('-')
		case r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the ids of a Markdown text's headings (code blocks left out).
func anchors(text string) []string {
	var ids []string
	for _, m := range mdHeading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		ids = append(ids, anchor(m[1]))
	}
	return ids
}

func TestReadmeIsAFrontDoor(t *testing.T) {
	readme := string(repoFile(t, "README.md"))
	if n := strings.Count(strings.TrimRight(readme, "\n"), "\n") + 1; n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a file in docs/ and link it", n, maxReadmeLines)
	}
	// Every file in docs/ is reachable from the README.
	names, err := filepath.Glob(filepath.Join(repoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no docs/*.md")
	}
	for _, n := range names {
		if rel := "docs/" + filepath.Base(n); !strings.Contains(readme, "]("+rel+")") && !strings.Contains(readme, "]("+rel+"#") {
			t.Errorf("README.md does not link %s: add it to the Documentation table", rel)
		}
	}
}

// Every relative link in README.md and docs/*.md names a file that exists, and a heading
// of it when it has a #fragment.
func TestDocsLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	for name, text := range files {
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(link, "#")
			target := name
			if path != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
				if _, err := os.Stat(filepath.Join(repoRoot(), target)); err != nil {
					t.Errorf("%s links %s: no such file", name, link)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			text, ok := files[target]
			if !ok {
				text = string(repoFile(t, target))
			}
			if !slices.Contains(anchors(text), frag) {
				t.Errorf("%s links %s: %s has no heading #%s (it has %v)", name, link, target, frag, anchors(text))
			}
		}
	}
}
