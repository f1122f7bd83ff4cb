// Command archstat prints the structure figures docs/architecture.md quotes, read from the
// source alone (nothing is built or run):
//
//   - per package: non-test lines and exported names (top-level, and methods of exported
//     types);
//   - the largest types by methods and by fields;
//   - inside one package (the -files flag, default queue): its files, the uses between files
//     (pairs of files where one names a top-level name or method defined in the other), how many
//     floors they stack into, and how many of those uses run back up from a lower file to a
//     higher one.
//
// Run it from the repository's root:
//
//	go run ./integration/archstat                   # every package under queue/
//	go run ./integration/archstat -root . -top 15   # every package of the module
//
// Names are resolved as the compiler resolves them (go/types over the package's own source;
// imported packages are not read and stand in as empty ones): a method counts as used where it
// is called on a value of its own type, not where another type's method, a field, a local
// variable or a name of another package is spelled the same. The figures are for comparing one
// tree with another measured the same way, not for absolute truth.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := flag.String("root", "queue", "the folder whose packages are measured (recursively)")
	files := flag.String("files", "queue", "the package folder whose files' uses are measured")
	top := flag.Int("top", 10, "how many of the largest types to list")
	listBack := flag.Bool("back", false, "also list the uses running back up, one per line (user -> used)")
	flag.Parse()

	pkgs, err := readPackages(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "archstat:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)

	fmt.Println("## packages: non-test lines, exported names (top-level + methods of exported types)")
	var allTypes []typeStat
	for _, d := range dirs {
		p := pkgs[d]
		top, methods := p.exported()
		fmt.Printf("%-40s %6d lines  %4d exported (%d top-level + %d methods)\n", d, p.lines, top+methods, top, methods)
		allTypes = append(allTypes, p.types()...)
	}

	fmt.Println()
	fmt.Printf("## the %d largest types by methods (fields)\n", *top)
	sort.Slice(allTypes, func(i, j int) bool {
		if allTypes[i].methods != allTypes[j].methods {
			return allTypes[i].methods > allTypes[j].methods
		}
		return allTypes[i].fields > allTypes[j].fields
	})
	for i := 0; i < len(allTypes) && i < *top; i++ {
		t := allTypes[i]
		fmt.Printf("%-50s %3d methods in %2d files, %3d fields\n", t.name, t.methods, t.files, t.fields)
	}
	fmt.Println()
	fmt.Printf("## the %d largest types by fields\n", *top)
	sort.Slice(allTypes, func(i, j int) bool { return allTypes[i].fields > allTypes[j].fields })
	for i := 0; i < len(allTypes) && i < *top; i++ {
		t := allTypes[i]
		fmt.Printf("%-50s %3d fields, %3d methods\n", t.name, t.fields, t.methods)
	}

	p, ok := pkgs[filepath.Clean(*files)]
	if !ok {
		return
	}
	fmt.Println()
	fmt.Printf("## files of %s\n", *files)
	edges := p.fileUses()
	floors, back, backUses := layer(p.fileNames(), edges)
	uses := 0
	for _, to := range edges {
		uses += len(to)
	}
	maxFloor := 0
	for _, f := range floors {
		maxFloor = max(maxFloor, f)
	}
	fmt.Printf("files %d, uses between files %d, floors %d, uses running back up %d\n",
		len(p.files), uses, maxFloor+1, back)
	if *listBack {
		sort.Strings(backUses)
		for _, u := range backUses {
			fmt.Println("  back up:", u)
		}
	}
}

type pkg struct {
	dir   string
	fset  *token.FileSet
	files map[string]*ast.File // by base name, non-test files only
	lines int
}

func readPackages(root string) (map[string]*pkg, error) {
	pkgs := map[string]*pkg{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.Dir(path)
		p := pkgs[dir]
		if p == nil {
			p = &pkg{dir: dir, fset: token.NewFileSet(), files: map[string]*ast.File{}}
			pkgs[dir] = p
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(p.fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		p.files[filepath.Base(path)] = f
		p.lines += strings.Count(string(src), "\n")
		return nil
	})
	return pkgs, err
}

func (p *pkg) fileNames() []string {
	names := make([]string, 0, len(p.files))
	for n := range p.files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func recvName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch t := t.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		if id, ok := t.X.(*ast.Ident); ok {
			return id.Name
		}
	case *ast.IndexListExpr:
		if id, ok := t.X.(*ast.Ident); ok {
			return id.Name
		}
	}
	return ""
}

// exported counts the package's exported top-level names and the exported methods of its
// exported types.
func (p *pkg) exported() (top, methods int) {
	for _, f := range p.files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if r := recvName(d); r == "" {
					top++
				} else if ast.IsExported(r) {
					methods++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							top++
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								top++
							}
						}
					}
				}
			}
		}
	}
	return top, methods
}

type typeStat struct {
	name                   string
	methods, fields, files int
}

func (p *pkg) types() []typeStat {
	byName := map[string]*typeStat{}
	methodFiles := map[string]map[string]bool{}
	get := func(n string) *typeStat {
		if byName[n] == nil {
			byName[n] = &typeStat{name: p.dir + "." + n}
			methodFiles[n] = map[string]bool{}
		}
		return byName[n]
	}
	for fname, f := range p.files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if r := recvName(d); r != "" {
					get(r).methods++
					methodFiles[r][fname] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						get(ts.Name.Name)
						continue
					}
					t := get(ts.Name.Name)
					for _, fl := range st.Fields.List {
						t.fields += max(1, len(fl.Names))
					}
				}
			}
		}
	}
	out := make([]typeStat, 0, len(byName))
	for n, t := range byName {
		t.files = len(methodFiles[n])
		out = append(out, *t)
	}
	return out
}

// fileUses returns, for each file, the other files of the package whose top-level names or
// methods it names. Names are resolved as the compiler does (go/types over the package's own
// files): a name counts where it means the other file's definition, not where it is only
// spelled the same (a local variable, a struct field, a method of another type, a name of an
// imported package, the definition itself). Imported packages are not read: each stands in as
// an empty package, so whatever is reached only through their types resolves to nothing.
func (p *pkg) fileUses() map[string]map[string]bool {
	names := p.fileNames()
	files := make([]*ast.File, 0, len(names))
	fileOf := map[*token.File]string{}
	for _, n := range names {
		f := p.files[n]
		files = append(files, f)
		fileOf[p.fset.File(f.Pos())] = n
	}
	conf := types.Config{
		Importer: emptyImporter{},
		Error:    func(error) {}, // what an empty import leaves undefined is expected
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	tp, _ := conf.Check(p.dir, p.fset, files, info)
	edges := map[string]map[string]bool{}
	for _, n := range names {
		edges[n] = map[string]bool{}
	}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != tp || !counted(obj, tp) {
			continue
		}
		from, to := fileOf[p.fset.File(id.Pos())], fileOf[p.fset.File(obj.Pos())]
		if from != "" && to != "" && from != to {
			edges[from][to] = true
		}
	}
	return edges
}

// counted reports whether obj is one of the names fileUses counts: a top-level name of the
// package, or a method declared on one of its types (not an interface's method, not a field).
func counted(obj types.Object, pkg *types.Package) bool {
	if obj.Parent() == pkg.Scope() {
		return true
	}
	fn, ok := obj.(*types.Func)
	if !ok {
		return false
	}
	recv := fn.Origin().Signature().Recv()
	return recv != nil && !types.IsInterface(recv.Type())
}

// emptyImporter gives every import as an empty, complete package named for the last element
// of its path: archstat reads one package's own source, never its dependencies.
type emptyImporter struct{}

func (emptyImporter) Import(path string) (*types.Package, error) {
	name := path[strings.LastIndex(path, "/")+1:]
	pkg := types.NewPackage(path, name)
	pkg.MarkComplete()
	return pkg, nil
}

// layer orders the files so that as few uses as possible run from a file to one placed above
// it (a greedy feedback-arc order: sources of what is left go last, sinks first), puts each file
// on the floor one above the highest file it uses downwards, and counts the uses that run back up.
func layer(names []string, edges map[string]map[string]bool) (map[string]int, int, []string) {
	left := map[string]bool{}
	for _, n := range names {
		left[n] = true
	}
	in := func(n string) int {
		c := 0
		for m := range left {
			if m != n && edges[m][n] {
				c++
			}
		}
		return c
	}
	out := func(n string) int {
		c := 0
		for m := range edges[n] {
			if left[m] {
				c++
			}
		}
		return c
	}
	var low, high []string // low: users of nothing left (bottom first); high: used by nothing left (top first)
	for len(left) > 0 {
		moved := true
		for moved {
			moved = false
			for _, n := range names {
				if left[n] && out(n) == 0 {
					low = append(low, n)
					delete(left, n)
					moved = true
				}
			}
			for _, n := range names {
				if left[n] && in(n) == 0 {
					high = append(high, n)
					delete(left, n)
					moved = true
				}
			}
		}
		if len(left) == 0 {
			break
		}
		best, bestScore := "", -1<<31
		for _, n := range names {
			if left[n] {
				if s := in(n) - out(n); s > bestScore {
					best, bestScore = n, s
				}
			}
		}
		// The most used of what is left goes low.
		low = append(low, best)
		delete(left, best)
	}
	order := append([]string{}, low...)
	for i := len(high) - 1; i >= 0; i-- {
		order = append(order, high[i])
	}
	pos := map[string]int{}
	for i, n := range order {
		pos[n] = i
	}
	floors := map[string]int{}
	back := 0
	var backUses []string
	for _, n := range order {
		f := 0
		for m := range edges[n] {
			if pos[m] < pos[n] {
				f = max(f, floors[m]+1)
			} else {
				back++
				backUses = append(backUses, n+" -> "+m)
			}
		}
		floors[n] = f
	}
	return floors, back, backUses
}
