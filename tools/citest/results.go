package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, plus the
// build events the go command adds).
type event struct {
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// tailLines is how many lines of a test's output are kept: enough to show a
// failure's assertion and what led to it, bounded whatever a test prints.
const tailLines = 40

// tail keeps the last lines written to it.
type tail struct {
	lines   []string
	dropped int
	partial string
}

func (t *tail) write(s string) {
	s = t.partial + s
	t.partial = ""
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			t.partial = s
			return
		}
		t.add(s[:i])
		s = s[i+1:]
	}
}

func (t *tail) add(line string) {
	// The framing lines test2json adds in -v mode say nothing a reader of a
	// failure needs.
	if strings.HasPrefix(line, "=== ") {
		return
	}
	if len(t.lines) == tailLines {
		copy(t.lines, t.lines[1:])
		t.lines = t.lines[:tailLines-1]
		t.dropped++
	}
	t.lines = append(t.lines, line)
}

// String is the kept output, one line each, with a note of what was dropped.
func (t *tail) String() string {
	lines := t.lines
	if t.partial != "" {
		lines = append(lines[:len(lines):len(lines)], t.partial)
	}
	var b strings.Builder
	if t.dropped > 0 {
		fmt.Fprintf(&b, "    (%d earlier lines not kept)\n", t.dropped)
	}
	for _, l := range lines {
		b.WriteString("    ")
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

func (t *tail) contains(sub string) bool {
	for _, l := range t.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return strings.Contains(t.partial, sub)
}

// testResult is one test (or subtest) of one run.
type testResult struct {
	Name    string
	Action  string // pass, fail, skip; "" when it started and never ended
	Elapsed time.Duration
	out     tail
}

// pkgResult is one package of one run.
type pkgResult struct {
	Name        string
	Action      string // pass, fail, skip; "" when the go command never reported it
	Elapsed     time.Duration
	BuildFailed bool
	out         tail // output not attributed to a test
	tests       map[string]*testResult
	order       []string
}

func (p *pkgResult) test(name string) *testResult {
	t, ok := p.tests[name]
	if !ok {
		t = &testResult{Name: name}
		p.tests[name] = t
		p.order = append(p.order, name)
	}
	return t
}

// failedLeaves are the failed tests none of whose subtests failed, in the
// order they started: the places a reader looks first.
func (p *pkgResult) failedLeaves() []*testResult {
	var out []*testResult
	for _, name := range p.order {
		t := p.tests[name]
		if t.Action != "fail" {
			continue
		}
		leaf := true
		for _, other := range p.order {
			if strings.HasPrefix(other, name+"/") && p.tests[other].Action == "fail" {
				leaf = false
				break
			}
		}
		if leaf {
			out = append(out, t)
		}
	}
	return out
}

// failedRoots are the top-level tests that failed or never finished: what a
// rerun runs again.
func (p *pkgResult) failedRoots() []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range p.order {
		t := p.tests[name]
		if t.Action != "fail" && t.Action != "" {
			continue
		}
		root, _, _ := strings.Cut(name, "/")
		if !seen[root] {
			seen[root] = true
			out = append(out, root)
		}
	}
	return out
}

// crashed tells whether the test binary died (a panic, the -timeout alarm, a
// fatal runtime error, the race detector's exit status): the tests after the
// culprit never ran, so only a rerun of the whole package tells anything.
func (p *pkgResult) crashed() bool {
	if p.Action != "fail" || p.BuildFailed {
		return false
	}
	markers := []string{"panic: ", "test timed out after", "fatal error: ", "exit status 2", "exit status 66"}
	for _, m := range markers {
		if p.out.contains(m) {
			return true
		}
	}
	for _, t := range p.tests {
		if t.Action == "" {
			return true
		}
		for _, m := range markers[:3] {
			if t.out.contains(m) {
				return true
			}
		}
	}
	// A package that failed with no failed test failed outside any test
	// (TestMain, an init, a leak check at exit).
	return len(p.failedRoots()) == 0
}

// runResult is what one `go test -json` invocation reported.
type runResult struct {
	pkgs     map[string]*pkgResult
	order    []string
	buildOut map[string]*tail // by import path
}

func newRunResult() *runResult {
	return &runResult{pkgs: map[string]*pkgResult{}, buildOut: map[string]*tail{}}
}

func (r *runResult) pkg(name string) *pkgResult {
	p, ok := r.pkgs[name]
	if !ok {
		p = &pkgResult{Name: name, tests: map[string]*testResult{}}
		r.pkgs[name] = p
		r.order = append(r.order, name)
	}
	return p
}

// add takes one event. It returns the package when the event ended it.
func (r *runResult) add(e event) *pkgResult {
	switch e.Action {
	case "build-output":
		t, ok := r.buildOut[e.ImportPath]
		if !ok {
			t = &tail{}
			r.buildOut[e.ImportPath] = t
		}
		t.write(e.Output)
		return nil
	case "build-fail":
		return nil
	}
	if e.Package == "" {
		return nil
	}
	p := r.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out.write(e.Output)
		case "pass", "fail", "skip":
			p.Action = e.Action
			p.Elapsed = seconds(e.Elapsed)
			if e.FailedBuild != "" {
				p.BuildFailed = true
			}
			return p
		}
		return nil
	}
	t := p.test(e.Test)
	switch e.Action {
	case "output":
		t.out.write(e.Output)
	case "pass", "fail", "skip":
		t.Action = e.Action
		t.Elapsed = seconds(e.Elapsed)
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// read decodes a `go test -json` stream into r, calling ended for each
// package as it ends. Lines that are not events (a go command that failed
// before testing) are passed to other.
func (r *runResult) read(in io.Reader, ended func(*pkgResult), other func(string)) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			other(string(line))
			continue
		}
		if p := r.add(e); p != nil && ended != nil {
			ended(p)
		}
	}
	return sc.Err()
}

// failedPkgs are the packages that failed, in the order they were reported.
func (r *runResult) failedPkgs() []*pkgResult {
	var out []*pkgResult
	for _, name := range r.order {
		if p := r.pkgs[name]; p.Action == "fail" {
			out = append(out, p)
		}
	}
	return out
}

// counts are the tests of a run by result, subtests included.
func (r *runResult) counts() (pass, fail, skip int) {
	for _, p := range r.pkgs {
		for _, t := range p.tests {
			switch t.Action {
			case "pass":
				pass++
			case "fail", "":
				fail++
			case "skip":
				skip++
			}
		}
	}
	return
}

// timed is a package or a test with how long it took.
type timed struct {
	Name    string
	Elapsed time.Duration
}

// slowest are the n slowest packages and top-level tests of the run.
func (r *runResult) slowest(n int) (pkgs, tests []timed) {
	for _, p := range r.pkgs {
		if p.Elapsed > 0 {
			pkgs = append(pkgs, timed{p.Name, p.Elapsed})
		}
		for _, t := range p.tests {
			if !strings.Contains(t.Name, "/") {
				tests = append(tests, timed{p.Name + " " + t.Name, t.Elapsed})
			}
		}
	}
	top := func(s []timed) []timed {
		sort.Slice(s, func(i, j int) bool {
			if s[i].Elapsed != s[j].Elapsed {
				return s[i].Elapsed > s[j].Elapsed
			}
			return s[i].Name < s[j].Name
		})
		if len(s) > n {
			s = s[:n]
		}
		return s
	}
	return top(pkgs), top(tests)
}
