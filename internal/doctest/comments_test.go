package doctest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goFileRE finds the Go file names a comment gives: wiring.go, ingress/wire.go, compat_*.go.
var goFileRE = regexp.MustCompile(`[A-Za-z0-9_*./-]*[A-Za-z0-9_*]\.go\b`)

// TestCommentsNameFiles: every Go file a comment of the repository names exists, so a comment cannot point at a
// file that was renamed or removed. A name with a directory (ingress/wire.go) must be the end of a file's path (one
// that starts with ../ is read from the comment's directory), a name with * must match one; nats.go (the client
// library) and suffixes (_test.go) are not file names.
func TestCommentsNameFiles(t *testing.T) {
	root := moduleRoot(t)
	var files []string // slash paths from root
	base := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, filepath.ToSlash(rel))
		base[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(name string) bool {
		if !strings.Contains(name, "*") && !strings.Contains(name, "/") {
			return base[name]
		}
		for _, f := range files {
			if strings.Contains(name, "/") {
				if ok, _ := path.Match("*/"+name, "/"+f); ok || strings.HasSuffix("/"+f, "/"+name) {
					return true
				}
				continue
			}
			if ok, _ := path.Match(name, path.Base(f)); ok {
				return true
			}
		}
		return false
	}
	fset := token.NewFileSet()
	checked := 0
	for _, rel := range files {
		if !strings.HasSuffix(rel, ".go") || strings.Contains(rel, "/testdata/") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(root, rel), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				for _, m := range goFileRE.FindAllStringIndex(c.Text, -1) {
					name := strings.TrimPrefix(c.Text[m[0]:m[1]], "./")
					before := c.Text[:m[0]]
					if name == "nats.go" || strings.HasSuffix(name, "/nats.go") || strings.HasPrefix(name, "_") ||
						strings.HasSuffix(before, ".") || strings.Contains(name, "github.com") {
						continue
					}
					checked++
					if strings.HasPrefix(name, "../") { // relative to the comment's file
						name = path.Join(path.Dir(rel), name)
					}
					if !exists(name) {
						t.Errorf("%s:%d: names %s, which is no file of the repository", rel, fset.Position(c.Pos()).Line, name)
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked %d file names in comments; the code's comments name far more", checked)
	}
	t.Logf("checked %d file names in comments", checked)
}
