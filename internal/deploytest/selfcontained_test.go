package deploytest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A fresh clone has nothing beside it: every file the code and its tests read must be inside
// the module. outsidePaths lists the string literals in the module's Go files that name a
// relative path leaving the module (such as "../../../outside/x.json" two folders down), as
// "file:line: literal".
func outsidePaths(t *testing.T, root string) []string {
	t.Helper()
	root, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !strings.HasPrefix(s, "../") || strings.ContainsAny(s, " \n%") {
				return true
			}
			target := filepath.Clean(filepath.Join(filepath.Dir(path), s))
			if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				found = append(found, fset.Position(lit.Pos()).String()+": "+lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestNothingReadsOutsideTheModule(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not two folders up: %v", err)
	}
	if found := outsidePaths(t, root); len(found) > 0 {
		t.Errorf("paths outside the module (a fresh clone has nothing beside it; keep a copy in testdata/):\n%s",
			strings.Join(found, "\n"))
	}
}

// The check itself finds such a path, and lets one that stays inside pass.
func TestOutsidePathsFindsOne(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test\n")
	write("a/b/in_test.go", "package b\nconst inside = \"../../testdata/x.json\"\n")
	write("a/b/out_test.go", "package b\nconst outside = \"../../../outside/x.json\"\n")
	found := outsidePaths(t, root)
	if len(found) != 1 || !strings.Contains(found[0], "out_test.go:2") || !strings.Contains(found[0], "outside/x.json") {
		t.Fatalf("found %q, want only out_test.go's outside path", found)
	}
}
