package broker_test

import (
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
	}
	subsystems = []string{
		"audit", "auth", "dispatch", "dlq", "filter", "ingress", "keyshared", "routes", "streams", "tokens",
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
