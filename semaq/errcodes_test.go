package semaq_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

// errCodeConst is an ErrCode* constant as the source declares it.
type errCodeConst struct {
	name  string
	value uint16
	pos   string // file:line
	block *ast.GenDecl
	file  string // base name
}

// parseErrCodes reads the package's Go files (tests excluded) and returns
// its ErrCode* constants and *APIError sentinels. It reads the source, not
// the compiled package, so a constant declared anywhere is found.
func parseErrCodes(t *testing.T) ([]errCodeConst, []sentinel) {
	t.Helper()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var consts []errCodeConst
	var sentinels []sentinel
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST && gd.Tok != token.VAR {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, id := range vs.Names {
					pos := fset.Position(id.Pos()).String()
					switch {
					case gd.Tok == token.CONST && strings.HasPrefix(id.Name, "ErrCode"):
						consts = append(consts, errCodeConst{name: id.Name, value: constValue(t, vs, i, pos), pos: pos, block: gd, file: path})
					case gd.Tok == token.VAR && strings.HasPrefix(id.Name, "Err") && i < len(vs.Values):
						if s, ok := apiErrorLiteral(t, id.Name, vs.Values[i], pos); ok {
							sentinels = append(sentinels, s)
						}
					}
				}
			}
		}
	}
	if len(consts) == 0 {
		t.Fatal("no ErrCode constants found in the package source")
	}
	return consts, sentinels
}

// constValue is the value of an ErrCode constant, which must be declared as
// `Name uint16 = <integer literal>` so that both this test and a reader see
// the number.
func constValue(t *testing.T, vs *ast.ValueSpec, i int, pos string) uint16 {
	t.Helper()
	if typ, ok := vs.Type.(*ast.Ident); !ok || typ.Name != "uint16" {
		t.Errorf("%s: %s: declare it as uint16", pos, vs.Names[i].Name)
	}
	if i >= len(vs.Values) {
		t.Fatalf("%s: %s: give it a literal value", pos, vs.Names[i].Name)
	}
	return intLiteral(t, vs.Values[i], pos)
}

func intLiteral(t *testing.T, e ast.Expr, pos string) uint16 {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		t.Fatalf("%s: want an integer literal, got %T", pos, e)
	}
	n, err := strconv.ParseUint(lit.Value, 0, 16)
	if err != nil {
		t.Fatalf("%s: %v", pos, err)
	}
	return uint16(n)
}

// sentinel is an `ErrX = &APIError{Code: n, ErrCode: ErrCodeY, ...}` var.
type sentinel struct {
	name, codeName, pos string
	status              int
}

func apiErrorLiteral(t *testing.T, name string, e ast.Expr, pos string) (sentinel, bool) {
	t.Helper()
	u, ok := e.(*ast.UnaryExpr)
	if !ok || u.Op != token.AND {
		return sentinel{}, false
	}
	cl, ok := u.X.(*ast.CompositeLit)
	if !ok {
		return sentinel{}, false
	}
	if typ, ok := cl.Type.(*ast.Ident); !ok || typ.Name != "APIError" {
		return sentinel{}, false
	}
	s := sentinel{name: name, pos: pos}
	for _, el := range cl.Elts {
		var key *ast.Ident
		kv, ok := el.(*ast.KeyValueExpr)
		if ok {
			key, ok = kv.Key.(*ast.Ident)
		}
		if !ok {
			t.Fatalf("%s: %s: use field names in the APIError literal", pos, name)
		}
		switch key.Name {
		case "Code":
			s.status = int(intLiteral(t, kv.Value, pos))
		case "ErrCode":
			id, ok := kv.Value.(*ast.Ident)
			if !ok {
				t.Fatalf("%s: %s: ErrCode must name an ErrCode constant", pos, name)
			}
			s.codeName = id.Name
		}
	}
	return s, true
}

// rangeRE is the first line of the doc comment of a const block of SemaQ's
// own codes: "// 20030-20039: dead letters (docs/dlq.md)."
var rangeRE = regexp.MustCompile(`^(\d+)-(\d+): `)

func TestErrorCodesMatchSource(t *testing.T) {
	t.Parallel()
	errorCodes := semaq.ErrorCodes()
	consts, sentinels := parseErrCodes(t)
	table := make(map[string]semaq.ErrorCode, len(errorCodes))
	for _, e := range errorCodes {
		if _, dup := table[e.Name]; dup {
			t.Errorf("errorCodes lists %s twice", e.Name)
		}
		table[e.Name] = e
		if e.Meaning == "" || e.Status < 100 || e.Status > 599 {
			t.Errorf("errorCodes: %s needs a meaning and an HTTP status, has %q and %d", e.Name, e.Meaning, e.Status)
		}
	}
	declared := make(map[string]errCodeConst, len(consts))
	for _, c := range consts {
		declared[c.name] = c
		if c.file != "errcodes.go" {
			t.Errorf("%s: %s: declare error codes in errcodes.go, with the others", c.pos, c.name)
		}
		e, ok := table[c.name]
		switch {
		case !ok:
			t.Errorf("%s: %s (%d) is not in errorCodes", c.pos, c.name, c.value)
		case e.Code != c.value:
			t.Errorf("errorCodes: %s has code %d, the constant is %d", c.name, e.Code, c.value)
		}
	}
	for _, e := range errorCodes {
		if _, ok := declared[e.Name]; !ok {
			t.Errorf("errorCodes lists %s (%d), which no constant declares", e.Name, e.Code)
		}
	}
	for _, s := range sentinels {
		e, ok := table[s.codeName]
		switch {
		case !ok:
			t.Errorf("%s: sentinel %s has ErrCode %q, which is not in errorCodes", s.pos, s.name, s.codeName)
		case e.Status != s.status:
			t.Errorf("%s: sentinel %s has Code %d, errorCodes says %s comes with %d", s.pos, s.name, s.status, s.codeName, e.Status)
		}
	}
	if len(sentinels) < 10 {
		t.Errorf("found %d APIError sentinels; the parser no longer sees them", len(sentinels))
	}
}

func TestErrorCodesUnique(t *testing.T) {
	t.Parallel()
	errorCodes := semaq.ErrorCodes()
	consts, sentinels := parseErrCodes(t)
	byValue := map[uint16]string{}
	for _, c := range consts {
		if other, dup := byValue[c.value]; dup {
			t.Errorf("%s: %s is %d, as is %s", c.pos, c.name, c.value, other)
		}
		byValue[c.value] = c.name
	}
	seen := map[uint16]string{}
	for _, e := range errorCodes {
		if other, dup := seen[e.Code]; dup {
			t.Errorf("errorCodes: %s and %s are both %d", other, e.Name, e.Code)
		}
		seen[e.Code] = e.Name
	}
	if !slices.IsSortedFunc(errorCodes, func(a, b semaq.ErrorCode) int { return int(a.Code) - int(b.Code) }) {
		t.Error("errorCodes is not in ascending order of code")
	}
	// errors.Is matches by code: two sentinels with one code would be one.
	bySentinel := map[string]string{}
	for _, s := range sentinels {
		if other, dup := bySentinel[s.codeName]; dup {
			t.Errorf("%s: sentinels %s and %s share %s", s.pos, other, s.name, s.codeName)
		}
		bySentinel[s.codeName] = s.name
	}
}

// SemaQ's own codes (20000-29999) sit in const blocks whose comment declares
// their range; the ranges do not overlap. JetStream's (10000-10999) are not
// SemaQ's to declare.
func TestErrorCodesRanges(t *testing.T) {
	t.Parallel()
	consts, _ := parseErrCodes(t)
	type span struct{ lo, hi uint16 }
	ranges := map[*ast.GenDecl]span{}
	for _, c := range consts {
		if _, done := ranges[c.block]; done || c.block.Doc == nil {
			continue
		}
		m := rangeRE.FindStringSubmatch(strings.TrimPrefix(c.block.Doc.List[0].Text, "// "))
		if m == nil {
			continue
		}
		lo, _ := strconv.ParseUint(m[1], 10, 16)
		hi, _ := strconv.ParseUint(m[2], 10, 16)
		if lo > hi || lo < 20000 || hi >= 30000 {
			t.Errorf("%s: range %s-%s is not within SemaQ's 20000-29999", c.pos, m[1], m[2])
		}
		ranges[c.block] = span{uint16(lo), uint16(hi)}
	}
	if len(ranges) == 0 {
		t.Fatal("no const block declares a range")
	}
	var spans []span
	for _, s := range ranges {
		spans = append(spans, s)
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.lo) - int(b.lo) })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo <= spans[i-1].hi {
			t.Errorf("ranges %d-%d and %d-%d overlap", spans[i-1].lo, spans[i-1].hi, spans[i].lo, spans[i].hi)
		}
	}
	for _, c := range consts {
		r, ranged := ranges[c.block]
		switch {
		case c.value >= 10000 && c.value <= 10999:
			t.Errorf("%s: %s is %d, a JetStream code", c.pos, c.name, c.value)
		case ranged && (c.value < r.lo || c.value > r.hi):
			t.Errorf("%s: %s is %d, outside its block's range %d-%d", c.pos, c.name, c.value, r.lo, r.hi)
		case !ranged && c.value >= 20000 && c.value < 30000:
			t.Errorf("%s: %s is %d, a SemaQ code in a block that declares no range (// 20xx0-20xx9: ...)", c.pos, c.name, c.value)
		}
	}
}

// docRow is a row of a table in docs/errors.md whose first cell is a number.
type docRow struct {
	line  int
	cells []string
	code  uint16
}

func readErrorsDoc(t *testing.T) []docRow {
	t.Helper()
	const path = "../docs/errors.md"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []docRow
	fenced := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		code, err := strconv.ParseUint(cells[0], 10, 16)
		if err != nil {
			continue // a header, a separator, or a row that is not one code
		}
		rows = append(rows, docRow{line: n, cells: cells, code: uint16(code)})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s documents no code: want table rows | code | name | status | meaning | ... |", path)
	}
	return rows
}

// docs/errors.md documents every code in a table row: | code | name |
// status | meaning | what to do |. Only such rows count: a number in prose
// or in a range heading documents nothing.
func TestErrorCodesDocumented(t *testing.T) {
	t.Parallel()
	errorCodes := semaq.ErrorCodes()
	rows := readErrorsDoc(t)
	byCode := make(map[uint16]semaq.ErrorCode, len(errorCodes))
	for _, e := range errorCodes {
		byCode[e.Code] = e
	}
	documented := map[uint16]int{}
	for _, r := range rows {
		at := "docs/errors.md:" + strconv.Itoa(r.line)
		if first, dup := documented[r.code]; dup {
			t.Errorf("%s: %d is documented again (first at line %d)", at, r.code, first)
		}
		documented[r.code] = r.line
		e, ok := byCode[r.code]
		if !ok {
			t.Errorf("%s: documents %d, which is not in errorCodes", at, r.code)
			continue
		}
		if len(r.cells) < 5 {
			t.Errorf("%s: %d: want | code | name | status | meaning | what to do |", at, r.code)
			continue
		}
		if r.cells[1] != e.Name {
			t.Errorf("%s: %d is named %q, errorCodes says %s", at, r.code, r.cells[1], e.Name)
		}
		if r.cells[2] != strconv.Itoa(e.Status) {
			t.Errorf("%s: %d has status %q, errorCodes says %d", at, r.code, r.cells[2], e.Status)
		}
	}
	for _, e := range errorCodes {
		if _, ok := documented[e.Code]; !ok {
			t.Errorf("docs/errors.md does not document %d (%s)", e.Code, e.Name)
		}
	}
}

// Registry errors reach NATS clients with their own code as err_code
// (internal/broker maps them through unchanged), so every code the registry
// declares is one of the table's, except those only its REST API answers.
func TestErrorCodesCoverRegistry(t *testing.T) {
	t.Parallel()
	errorCodes := semaq.ErrorCodes()
	restOnly := map[uint16]bool{415: true} // unsupported media type: the NATS API has no Content-Type
	const path = "../internal/registry/errors.go"
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[uint16]bool{}
	for _, e := range errorCodes {
		codes[e.Code] = true
	}
	n := 0
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "Code") || i >= len(vs.Values) {
					continue
				}
				n++
				v := intLiteral(t, vs.Values[i], path+": "+id.Name)
				if !codes[v] && !restOnly[v] {
					t.Errorf("%s: registry.%s (%d) reaches NATS clients but is not in errorCodes", path, id.Name, v)
				}
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s declares no Code constants; the test no longer sees them", path)
	}
}

func TestErrorCodesIsACopy(t *testing.T) {
	t.Parallel()
	got := semaq.ErrorCodes()
	if len(got) == 0 {
		t.Fatal("ErrorCodes() is empty")
	}
	got[0].Code++
	if semaq.ErrorCodes()[0].Code == got[0].Code {
		t.Error("ErrorCodes() returned the table itself")
	}
}
