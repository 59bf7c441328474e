package doctest

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// TestArchitectureNames keeps docs/architecture.md true to the code: every file path and every Go name it puts in
// backticks must exist, and every link into docs/ must reach a file and a heading. The rules are in checkDoc.
func TestArchitectureNames(t *testing.T) {
	root := moduleRoot(t)
	code := codeOf(t, root)
	text, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := checkDoc(root, "docs/architecture.md", string(text), code)
	for _, p := range r.problems {
		t.Error(p)
	}
	// A parser that found nothing would pass: the page names hundreds of each.
	if r.paths < 150 || r.names < 300 || r.links < 20 {
		t.Errorf("checked %d paths, %d Go names and %d links: the page names far more, so the checker missed them",
			r.paths, r.names, r.links)
	}
	for name := range outside {
		if !r.outsideSeen[name] {
			t.Errorf("outside lists %q, which docs/architecture.md no longer names: remove it", name)
		}
	}
	t.Logf("checked %d paths, %d Go names, %d links", r.paths, r.names, r.links)
}

// TestContributingNames holds CONTRIBUTING.md to the same rules: its paths, Go names and links exist.
func TestContributingNames(t *testing.T) {
	root := moduleRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "CONTRIBUTING.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := checkDoc(root, "CONTRIBUTING.md", string(text), codeOf(t, root))
	for _, p := range r.problems {
		t.Error(p)
	}
	if r.paths < 15 || r.names < 15 || r.links < 5 {
		t.Errorf("checked %d paths, %d Go names and %d links: the page names more, so the checker missed them",
			r.paths, r.names, r.links)
	}
}

// TestArchitectureCheckerRefuses runs the checker on a made-up page: each kind of name that does not exist is
// reported, and the same kinds that do exist are not.
func TestArchitectureCheckerRefuses(t *testing.T) {
	root := moduleRoot(t)
	code := codeOf(t, root)
	page := strings.Join([]string{
		"# Page",
		"",
		"| path | what |",
		"|---|---|",
		"| `internal/broker/ingress/` | `pipeline.go`, `nosuch.go`, `acks*.go`, `nosuch*.go`, `ingress.Deps`, `ingress.Deps.Nosuch` |",
		"| `internal/broker/nosuch/` | a directory that is not there |",
		"| `internal/broker/ingress/` | a second row for the same directory |",
		"",
		"The node's `wiring.go` and `ingress/wire.go`; not `ingress/nosuch.go` nor `cmd/nosuch/`.",
		"`broker.WithFrontDoor`, `broker.WithNothing`, `Dispatcher.mu`, `Dispatcher.nosuch`, `ingress.mu`,",
		"`tokens.New(tokens.Deps)`, `tokens.New(tokens.Nosuch)`, `Close(ctx)`, `Unclose(ctx)`, `*table.Table`,",
		"`Registry[T]`, `Nosuchname`, `semaq.api` (a queue group), `semaq.nosuch.group`, `sync.RWMutex`.",
		"Not names: `--auth`, `$SQ.API.*`, `Semaq-Ack`, `SQ_TOKENS`, `semaq serve`, `ai.inference.llm`, `net/http`,",
		"`/usr/bin/chromium`.",
		"[here](#page), [nowhere](#nowhere), [security](security.md#tls), [gone](gone.md), [bad](security.md#nosuch),",
		"[benchmarks](benchmarks/), [gone](gone/).",
	}, "\n")
	r := checkDoc(root, "docs/page.md", page, code)
	want := []string{
		"`nosuch.go`", "`nosuch*.go`", "`ingress.Deps.Nosuch`", "`internal/broker/nosuch/`",
		"`ingress/nosuch.go`", "`cmd/nosuch/`", "`broker.WithNothing`", "`Dispatcher.nosuch`",
		"`tokens.Nosuch`", "`Unclose(ctx)`", "`Nosuchname`", "`semaq.nosuch.group`",
		"#nowhere", "gone.md", "security.md#nosuch", "a second row for `internal/broker/ingress/`", "gone/",
	}
	all := strings.Join(r.problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("the checker did not report %s; it reported:\n%s", w, all)
		}
	}
	if len(r.problems) != len(want) {
		t.Errorf("the checker reported %d problems, want %d:\n%s", len(r.problems), len(want), all)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	return root
}

// outside are the names the page takes from code outside this repository, checked by hand; each must still be
// on the page.
var outside = map[string]string{
	"sync.RWMutex":               "the standard library",
	"server.ReloadOptions":       "nats-server's package server",
	"CustomClientAuthentication": "a field of nats-server's Options",
	"JszAccount":                 "a method of nats-server's Server",
}

// codeIndex is every name declared in the repository's Go files (tests included: a page may name a test).
type codeIndex struct {
	pkgs    map[string][]*pkgIndex       // by package name (a _test package counts as its package)
	types   map[string][]map[string]bool // type name → its members (fields, methods), one map per declaration
	names   map[string]bool              // every declared name: top-level, field, method
	strings map[string]bool              // every string literal: names the code keeps (queue groups, consumers)
}

type pkgIndex struct {
	top   map[string]bool
	types map[string]map[string]bool
}

var (
	indexOnce sync.Once
	index     *codeIndex
	indexErr  error
)

// codeOf indexes the repository once for the package's tests.
func codeOf(t *testing.T, root string) *codeIndex {
	t.Helper()
	indexOnce.Do(func() { index, indexErr = indexCode(root) })
	if indexErr != nil {
		t.Fatal(indexErr)
	}
	return index
}

func indexCode(root string) (*codeIndex, error) {
	c := &codeIndex{pkgs: map[string][]*pkgIndex{}, types: map[string][]map[string]bool{},
		names: map[string]bool{}, strings: map[string]bool{}}
	byDir := map[string]*pkgIndex{} // directory and package name → index
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(f.Name.Name, "_test")
		key := filepath.Dir(p) + "\x00" + name
		pkg := byDir[key]
		if pkg == nil {
			pkg = &pkgIndex{top: map[string]bool{}, types: map[string]map[string]bool{}}
			byDir[key] = pkg
			c.pkgs[name] = append(c.pkgs[name], pkg)
		}
		c.indexFile(pkg, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, pkg := range byDir {
		for typ, members := range pkg.types {
			c.types[typ] = append(c.types[typ], members)
		}
	}
	return c, nil
}

func (c *codeIndex) indexFile(pkg *pkgIndex, f *ast.File) {
	members := func(typ string) map[string]bool {
		m := pkg.types[typ]
		if m == nil {
			m = map[string]bool{}
			pkg.types[typ] = m
		}
		return m
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			c.names[d.Name.Name] = true
			if d.Recv == nil || len(d.Recv.List) == 0 {
				pkg.top[d.Name.Name] = true
				continue
			}
			members(receiverType(d.Recv.List[0].Type))[d.Name.Name] = true
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					pkg.top[s.Name.Name] = true
					c.names[s.Name.Name] = true
					m := members(s.Name.Name)
					switch tt := s.Type.(type) {
					case *ast.StructType:
						c.fields(m, tt.Fields)
					case *ast.InterfaceType:
						c.fields(m, tt.Methods)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						pkg.top[n.Name] = true
						c.names[n.Name] = true
					}
				}
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				c.strings[s] = true
			}
		}
		return true
	})
}

// fields adds a struct's fields or an interface's methods; an embedded one is named by its type.
func (c *codeIndex) fields(m map[string]bool, list *ast.FieldList) {
	for _, f := range list.List {
		names := f.Names
		if len(names) == 0 {
			if n := receiverType(f.Type); n != "" {
				names = []*ast.Ident{{Name: n}}
			}
		}
		for _, n := range names {
			m[n.Name] = true
			c.names[n.Name] = true
		}
	}
}

// receiverType is the name of a receiver's or an embedded field's type: T of T, *T, pkg.T, T[X].
func receiverType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return receiverType(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.IndexExpr:
		return receiverType(t.X)
	case *ast.IndexListExpr:
		return receiverType(t.X)
	}
	return ""
}

// docReport is what checkDoc found.
type docReport struct {
	problems            []string
	paths, names, links int
	outsideSeen         map[string]bool
}

var (
	codeSpanRE = regexp.MustCompile("`([^`]+)`")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	pathRE     = regexp.MustCompile(`^[A-Za-z0-9_.*/-]+$`)
	identRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	listItemRE = regexp.MustCompile(`^\s*(-|\d+\.) `)
)

// checkDoc checks one page (rel is its path from root) against the code. The page is read in blocks: a table row,
// a list item, a paragraph, a heading; fenced code is skipped. In each block, every code span is one of:
//
//   - A path: path characters only, with a slash or ending in .go (`internal/broker/wiring.go`, `ingress/acks.go`,
//     `wiring.go`, `tokens*.go`, `semaq/`). It is looked up relative to the directories the block has named so far
//     (a file-map row starts with its first cell's), then the module root, then internal/broker (the node, which
//     the page is about); a trailing slash must be a directory, .go a file, a * at least one match.
//   - A Go name: `pkg.Name`, `pkg.Type.Member`, `Type.Member`, `Name(args)`, `*pkg.Type`, `Type[T]`,
//     `pkg.Type{A, B}` (and the dotted names among the arguments). A qualifier is a package of the module, or a
//     type (a package's own type too: `ingress.mu` is ingress.Ingress's mu), and the next name a top-level name of
//     the package or a field or method of the type. A lone name is checked when it is written as a call
//     (`Close(ctx)`) or in mixed case (`Deps`, `ownStreams`): it must be declared somewhere. Lowercase dotted
//     names that are no Go name must be a string the code holds (queue groups: `semaq.api`).
//   - Anything else is not a name the code declares and is skipped: flags, subjects ($…), headers (A-B), commands
//     with spaces, config keys, all-caps stream names, lowercase words.
//
// Links to docs/ pages must reach an existing file and, with #anchor, one of its headings; a table names each first
// cell once.
func checkDoc(root, rel, text string, code *codeIndex) docReport {
	r := docReport{outsideSeen: map[string]bool{}}
	dir := path.Dir(rel)
	rows := map[string]int{} // a file-map row's first cell → its line
	for _, b := range docBlocks(text) {
		ctx := []string{}
		if b.firstCell != "" {
			cell := strings.TrimSpace(b.firstCell)
			if line, ok := rows[cell]; ok {
				r.problems = append(r.problems, fmt.Sprintf("%s:%d: a second row for %s (the first is line %d)", rel, b.line, cell, line))
			}
			rows[cell] = b.line
			for _, m := range codeSpanRE.FindAllStringSubmatch(b.firstCell, -1) {
				if d, ok := resolvePath(root, m[1], nil); ok {
					ctx = append(ctx, d)
				}
			}
		}
		for _, m := range codeSpanRE.FindAllStringSubmatch(b.text, -1) {
			tok := m[1]
			switch {
			case isPath(tok):
				r.paths++
				if isStdPackage(tok) {
					continue
				}
				d, ok := resolvePath(root, tok, ctx)
				if !ok {
					r.problems = append(r.problems, fmt.Sprintf("%s:%d: `%s`: no such file or directory (looked in %s)",
						rel, b.line, tok, strings.Join(lookedIn(ctx), ", ")))
					continue
				}
				ctx = append(ctx, d)
			default:
				n, bad := code.checkName(tok, r.outsideSeen)
				r.names += n
				for _, name := range bad {
					r.problems = append(r.problems, fmt.Sprintf("%s:%d: `%s`: no such Go name in the module", rel, b.line, name))
				}
			}
		}
		for _, m := range linkRE.FindAllStringSubmatch(b.text, -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			r.links++
			if p := checkLink(root, dir, rel, text, target); p != "" {
				r.problems = append(r.problems, fmt.Sprintf("%s:%d: link %s: %s", rel, b.line, target, p))
			}
		}
	}
	return r
}

// docBlock is a table row, list item, paragraph or heading: its first line and its text, lines joined by spaces.
type docBlock struct {
	line      int
	text      string
	firstCell string // a table row's first cell
}

func docBlocks(text string) []docBlock {
	var (
		out   []docBlock
		cur   *docBlock
		fence bool
	)
	end := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trim, "```"):
			end()
			fence = !fence
		case fence:
		case trim == "":
			end()
		case strings.HasPrefix(trim, "|"):
			end()
			if strings.Trim(trim, "|-: ") == "" {
				continue // the header's rule
			}
			out = append(out, docBlock{line: n, text: trim, firstCell: firstCell(trim)})
		case strings.HasPrefix(trim, "#"), listItemRE.MatchString(line):
			end()
			cur = &docBlock{line: n, text: trim}
		case cur == nil:
			cur = &docBlock{line: n, text: trim}
		default:
			cur.text += " " + trim
		}
	}
	end()
	return out
}

// firstCell is the text of a table row's first cell; a | inside a code span does not end it.
func firstCell(row string) string {
	in := false
	for i := 1; i < len(row); i++ {
		switch row[i] {
		case '`':
			in = !in
		case '|':
			if !in {
				return row[1:i]
			}
		}
	}
	return ""
}

// isPath reports whether tok is a path of the repository; an absolute one (/usr/bin/chromium) is the machine's.
func isPath(tok string) bool {
	return pathRE.MatchString(tok) && !strings.HasPrefix(tok, "/") &&
		(strings.Contains(tok, "/") || strings.HasSuffix(tok, ".go"))
}

// isStdPackage reports whether tok is a standard library import path (`net/http`), not a path of the module.
func isStdPackage(tok string) bool {
	if strings.HasSuffix(tok, "/") || strings.HasSuffix(tok, ".go") || strings.Contains(tok, "*") {
		return false
	}
	p, err := build.Default.Import(tok, "", build.FindOnly)
	return err == nil && p.Goroot
}

// bases are where a path is looked up after the block's own directories: the module root, the node.
var bases = []string{".", "internal/broker"}

// lookedIn is ctx, latest first, then the bases, each once.
func lookedIn(ctx []string) []string {
	var out []string
	for i := len(ctx) - 1; i >= 0; i-- {
		out = append(out, ctx[i])
	}
	out = append(out, bases...)
	seen := map[string]bool{}
	uniq := out[:0]
	for _, d := range out {
		if !seen[d] {
			seen[d] = true
			uniq = append(uniq, d)
		}
	}
	return uniq
}

// resolvePath finds tok under one of ctx (latest first) or the bases and returns the directory it names or is in,
// relative to root.
func resolvePath(root, tok string, ctx []string) (string, bool) {
	wantDir := strings.HasSuffix(tok, "/")
	wantFile := strings.HasSuffix(tok, ".go")
	for _, d := range lookedIn(ctx) {
		p := filepath.Join(root, d, tok)
		var found []string
		if strings.Contains(tok, "*") {
			found, _ = filepath.Glob(p)
		} else {
			found = []string{p}
		}
		for _, f := range found {
			fi, err := os.Stat(f)
			if err != nil || (wantDir && !fi.IsDir()) || (wantFile && fi.IsDir()) {
				continue
			}
			relDir := path.Join(d, strings.TrimSuffix(tok, "/"))
			if !fi.IsDir() {
				relDir = path.Dir(relDir)
			}
			return relDir, true
		}
	}
	return "", false
}

// checkName checks the Go names in one code span and returns how many it checked and those that do not exist.
func (c *codeIndex) checkName(tok string, outsideSeen map[string]bool) (int, []string) {
	if _, ok := outside[tok]; ok {
		outsideSeen[tok] = true
		return 0, nil
	}
	expr := strings.TrimPrefix(tok, "*")
	var extra []string // names inside: a literal's fields, a call's arguments
	if i := strings.IndexByte(expr, '{'); i > 0 && strings.HasSuffix(expr, "}") {
		for _, f := range strings.Split(expr[i+1:len(expr)-1], ",") {
			extra = append(extra, expr[:i]+"."+strings.TrimSpace(f))
		}
		expr = expr[:i]
	}
	segs, args, ok := splitName(expr)
	if !ok {
		return 0, nil // not a Go name
	}
	for _, a := range args {
		if strings.Contains(a, ".") {
			extra = append(extra, a)
		}
	}
	checked, called := 0, len(args) > 0 || strings.Contains(expr, "(")
	var bad []string
	switch {
	case len(segs) == 1 && (called || mixedCase(segs[0])):
		checked++
		if !c.names[segs[0]] {
			bad = append(bad, tok)
		}
	case len(segs) > 1:
		checked++
		if !c.resolve(segs) && !(allLower(segs) && c.strings[expr]) {
			if allLower(segs) && !c.isQualifier(segs[0]) {
				checked-- // a subject or a word with a dot (ai.inference.llm), no Go name
			} else {
				bad = append(bad, tok)
			}
		}
	}
	for _, e := range extra {
		segs, _, ok := splitName(e)
		if !ok {
			continue
		}
		checked++
		if !c.resolve(segs) {
			bad = append(bad, e)
		}
	}
	return checked, bad
}

// splitName splits a.b(x, y).c[T] into its names and the call arguments; ok is false when tok is no Go name.
func splitName(tok string) (segs, args []string, ok bool) {
	for _, part := range splitTop(tok) {
		if i := strings.IndexAny(part, "(["); i >= 0 {
			closer := map[byte]byte{'(': ')', '[': ']'}[part[i]]
			if part[len(part)-1] != closer {
				return nil, nil, false
			}
			if part[i] == '(' {
				for _, a := range strings.Split(part[i+1:len(part)-1], ",") {
					if a = strings.TrimSpace(a); a != "" {
						args = append(args, a)
					}
				}
			}
			part = part[:i]
		}
		if !identRE.MatchString(part) {
			return nil, nil, false
		}
		segs = append(segs, part)
	}
	return segs, args, len(segs) > 0
}

// splitTop splits on the dots outside parentheses and brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case '.':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func (c *codeIndex) isQualifier(name string) bool {
	return len(c.pkgs[name]) > 0 || len(c.types[name]) > 0
}

// resolve reports whether a dotted name exists: pkg.Name[.Member...], pkg.Member of the package's own type, or
// Type.Member; a member after the first is any declared name (its type is not followed).
func (c *codeIndex) resolve(segs []string) bool {
	rest := func(n int) bool {
		for _, s := range segs[n:] {
			if !c.names[s] {
				return false
			}
		}
		return true
	}
	for _, pkg := range c.pkgs[segs[0]] {
		if pkg.top[segs[1]] {
			if len(segs) == 2 {
				return true
			}
			if m := pkg.types[segs[1]]; m != nil && m[segs[2]] && rest(3) {
				return true
			}
			if pkg.types[segs[1]] == nil && rest(2) { // pkg.Func().x, pkg.Var.x
				return true
			}
		}
		for typ, m := range pkg.types {
			if strings.EqualFold(typ, segs[0]) && m[segs[1]] && rest(2) {
				return true
			}
		}
	}
	for _, m := range c.types[segs[0]] {
		if m[segs[1]] && rest(2) {
			return true
		}
	}
	// A function's result: account().hasInterest.
	return c.names[segs[0]] && !c.isQualifier(segs[0]) && rest(1)
}

func mixedCase(s string) bool {
	var upper, lower bool
	for _, r := range s {
		upper = upper || unicode.IsUpper(r)
		lower = lower || unicode.IsLower(r)
	}
	return upper && lower
}

func allLower(segs []string) bool {
	for _, s := range segs {
		if strings.ToLower(s) != s {
			return false
		}
	}
	return true
}

// checkLink checks a relative link from the page at rel (in dir, its text page): its file exists, its anchor is a
// heading there.
func checkLink(root, dir, rel, page, target string) string {
	file, anchor, _ := strings.Cut(target, "#")
	p, text := rel, page
	if file != "" {
		p = path.Join(dir, file)
		if fi, err := os.Stat(filepath.Join(root, p)); err == nil && fi.IsDir() && anchor == "" {
			return ""
		}
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return "no such file " + p
		}
		text = string(b)
	}
	if anchor == "" || !strings.HasSuffix(p, ".md") {
		return ""
	}
	for _, h := range headings(text) {
		if h == anchor {
			return ""
		}
	}
	return "no heading #" + anchor + " in " + p
}

// headings are a page's heading anchors, as GitHub makes them: lower case, spaces to hyphens, punctuation dropped.
func headings(text string) []string {
	var out []string
	fence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
