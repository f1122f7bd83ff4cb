package main

import (
	"os"
	"path/filepath"
	"testing"
)

// writePackage writes files (base name -> source) into a fresh folder and reads it as
// archstat reads a package.
func writePackage(t *testing.T, files map[string]string) *pkg {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkgs, err := readPackages(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := pkgs[dir]
	if p == nil {
		t.Fatalf("no package read in %s", dir)
	}
	return p
}

// A name spelled like another file's definition is no use of that file: a type named like a
// method, a method of another type, a local variable, a struct field, a name of an imported
// package, a definition of the same spelling. A real use (a type, a function, a method called
// on its own type, through an embedded field too) still counts.
func TestFileUsesResolveNamesNotSpellings(t *testing.T) {
	p := writePackage(t, map[string]string{
		"replies.go": `package demo

type Replies struct{}

// Key is a method of Replies.
func (r *Replies) Key() string { return "" }

func (r *Replies) Close() error { return nil }
`,
		"worker.go": `package demo

type Worker struct {
	lifecycle
	replies *Replies
}

// Replies is a method spelled like the type of replies.go.
func (w *Worker) Replies() *Replies { return w.replies }
`,
		"lifecycle.go": `package demo

type lifecycle struct{}

func (l *lifecycle) Run() {}
`,
		"spelled.go": `package demo

import (
	"strings"
	"time"
)

type other struct{ Key string }

// Close is another type's Close.
func (o other) Close() error { return nil }

func spelled() {
	t := time.NewTimer(time.Second)
	t.Stop()
	Replies := 1 // a local variable
	_ = Replies
	o := other{Key: "k"} // a field
	_ = o.Key
	_ = strings.Title     // an imported package's name
	var r struct{ Run func() }
	r.Run() // a field named like lifecycle's method
}
`,
		"user.go": `package demo

func use(w *Worker) {
	_ = w.Replies()   // worker.go
	w.Run()           // lifecycle.go, through the embedded field
	var r *Replies     // replies.go
	_ = r.Key()
}
`,
	})
	edges := p.fileUses()
	want := map[string][]string{
		"replies.go":   nil,
		"lifecycle.go": nil,
		"worker.go":    {"lifecycle.go", "replies.go"},
		"spelled.go":   nil,
		"user.go":      {"lifecycle.go", "replies.go", "worker.go"},
	}
	for from, tos := range want {
		got := edges[from]
		if len(got) != len(tos) {
			t.Errorf("%s uses %v, want %v", from, keys(got), tos)
			continue
		}
		for _, to := range tos {
			if !got[to] {
				t.Errorf("%s uses %v, want %v", from, keys(got), tos)
			}
		}
	}
}

func keys(m map[string]bool) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	return out
}
