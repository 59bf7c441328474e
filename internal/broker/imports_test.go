package broker_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/semaq/semaq/"

// The broker's layering, as data. A package under internal/broker is a
// leaf (building blocks every part may use) or a subsystem (a part of the
// node, opened by the list in subsystems.go). A subsystem imports leaves
// only: never the broker, never a sibling subsystem; a leaf imports other
// leaves only. What a subsystem needs of another comes in its Deps.
var (
	leaves = []string{
		"api",            // the management API's handler shape and errors
		"subsystem",      // the contract between the node and its parts
		"subjects",       // subject pattern matching
		"wire",           // the ingress's NATS protocol reader
		"keyhash",        // sticky keys' hash
		"groupcommit",    // fsync batching
		"quota",          // token-bucket limits
		"pump",           // consumer pumps filters and key-shared groups build on
		"dispatch/sched", // the dispatcher's scheduling queue
		"routes/table",   // compiled route rules: the ingress evaluates them
		"chainhead",      // session chains' head records: the ingress writes them, chains reads them
	}
	subsystems = []string{
		"agents", "audit", "auth", "chains", "classes", "clusterstatus", "clustersync", "dispatch", "dlq", "filter", "ingress", "jsguard",
		"keyshared", "models", "policies", "routes", "schemas", "sessions", "streams", "tokens", "users",
	}
	// doors are what the broker must never import, even through
	// another package: the SDK and the doors built on it.
	doors = []string{"client", "internal/httpapi", "internal/gateway", "internal/node"}
)

// imports lists the module's packages each package under dir imports, from
// its non-test files.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(p, module) {
				seen[strings.TrimPrefix(p, module)] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// brokerPackages are the packages under internal/broker, relative to it.
func brokerPackages(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || path == "." || d.Name() == "testdata" {
			return nil
		}
		if m, _ := filepath.Glob(filepath.Join(path, "*.go")); len(m) > 0 {
			out = append(out, filepath.ToSlash(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImportRules(t *testing.T) {
	const broker = "internal/broker"
	for _, pkg := range brokerPackages(t) {
		isLeaf, isSub := slices.Contains(leaves, pkg), slices.Contains(subsystems, pkg)
		if !isLeaf && !isSub {
			t.Errorf("internal/broker/%s is neither a leaf nor a subsystem: declare it in imports_test.go", pkg)
			continue
		}
		for _, im := range imports(t, pkg) {
			rel, under := strings.CutPrefix(im, broker+"/")
			switch {
			case im == broker:
				t.Errorf("internal/broker/%s imports the broker: what it needs of the node comes in its Deps", pkg)
			case under && !slices.Contains(leaves, rel) && !strings.HasPrefix(rel, pkg+"/"):
				kind := "subsystem"
				if isLeaf {
					kind = "leaf"
				}
				t.Errorf("%s internal/broker/%s imports internal/broker/%s, which is not a leaf", kind, pkg, rel)
			}
		}
	}
	// The broker and everything it imports, transitively.
	seen := map[string]bool{}
	var walk func(pkg string)
	walk = func(pkg string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		for _, im := range imports(t, filepath.Join("../..", pkg)) {
			walk(im)
		}
	}
	walk(broker)
	for _, fd := range doors {
		if seen[fd] {
			t.Errorf("the broker imports %s (through its imports): the front doors are built on the broker, not in it", fd)
		}
	}
	if len(seen) < 10 {
		t.Fatalf("walked %d packages from the broker: the walk is broken", len(seen))
	}
}

// Limits of size, as the layering's guard: a package that outgrows them
// wants splitting along a seam, and a node type that gathers methods is a
// subsystem that was not made one.
const (
	maxPackageLines = 5000 // non-test lines of any package of the module
	maxNodeMethods  = 60   // methods of *broker.Server
)

// surfaceLines bound the packages that are a surface rather than layers:
// the API's vocabulary (semaq), the SDK (client) and the command tree
// (internal/cli) grow by one flat file per feature, and splitting the
// first two would hand their users more imports. They have room to 6,500
// lines; past that, the CLI's command groups go to packages of their own.
var surfaceLines = map[string]int{"semaq": 6500, "client": 6500, "internal/cli": 6500}

func TestPackageSizes(t *testing.T) {
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		lines := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			lines += strings.Count(string(b), "\n")
		}
		limit := maxPackageLines
		if rel, err := filepath.Rel(root, path); err == nil && surfaceLines[filepath.ToSlash(rel)] > 0 {
			limit = surfaceLines[filepath.ToSlash(rel)]
		}
		if lines > limit {
			t.Errorf("%s has %d non-test lines; the limit is %d: split it along a seam", path, lines, limit)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNodeMethods(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Server" {
					n++
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("found no methods of *Server: the count is broken")
	}
	if n >= maxNodeMethods {
		t.Errorf("*Server has %d methods; the limit is %d: what grows it is a subsystem (subsystems.go)", n, maxNodeMethods)
	}
}
