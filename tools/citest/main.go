// Command citest runs a Go module's tests the way SemaQ's CI does: one
// `go test -json` over the packages, then each failed test once more, alone.
// A test that passes on its second try is reported as FLAKY (a bug to fix, not
// a pass to forget) and does not fail the run; a test that fails twice, a
// package that does not build, or a go command that fails outside any test
// does.
//
// When a test binary dies (a panic, the -timeout alarm, a fatal error) the
// tests after the culprit never ran, so the whole package runs again instead
// of the culprit alone.
//
// With -runs N the suite runs N times without reruns and every test that
// failed at least once is listed with its count: the flake hunt to run before
// a release and after a change to timing-sensitive code.
//
//	go -C tools/citest run . -race -timeout 20m -C ../.. ./...
//	go -C tools/citest run . -runs 5 -C ../.. ./...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
)

type config struct {
	dir      string
	goCmd    string
	race     bool
	short    bool
	timeout  time.Duration
	runs     int
	rerun    bool
	slowest  int
	jsonFile string
	pkgs     []string
	extra    []string // more go test flags, after --
	stdout   io.Writer
	stderr   io.Writer
}

func main() {
	cfg := config{stdout: os.Stdout, stderr: os.Stderr}
	fs := flag.NewFlagSet("citest", flag.ExitOnError)
	fs.StringVar(&cfg.dir, "C", ".", "run go test in this directory (the module's root)")
	fs.StringVar(&cfg.goCmd, "go", "go", "the go command")
	fs.BoolVar(&cfg.race, "race", false, "build with the race detector")
	fs.BoolVar(&cfg.short, "short", false, "pass -short")
	fs.DurationVar(&cfg.timeout, "timeout", 20*time.Minute, "go test -timeout of each package binary")
	fs.IntVar(&cfg.runs, "runs", 1, "run the suite this many times, without reruns, and count each test's failures")
	fs.BoolVar(&cfg.rerun, "rerun", true, "rerun each failed test once, alone (one run only)")
	fs.IntVar(&cfg.slowest, "slowest", 12, "list this many of the slowest packages and tests (0: none)")
	fs.StringVar(&cfg.jsonFile, "jsonfile", "", "write every go test -json event of every run (reruns included) to this file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: citest [flags] [packages] [-- go test flags]\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	args := fs.Args()
	for i, a := range args {
		if a == "--" {
			cfg.extra = args[i+1:]
			args = args[:i]
			break
		}
	}
	cfg.pkgs = args
	if len(cfg.pkgs) == 0 {
		cfg.pkgs = []string{"./..."}
	}
	if cfg.runs < 1 {
		fmt.Fprintln(os.Stderr, "citest: -runs must be at least 1")
		os.Exit(2)
	}

	if cfg.jsonFile != "" {
		// Each invocation's events, not an earlier one's.
		if err := os.WriteFile(cfg.jsonFile, nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "citest:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var ok bool
	var err error
	if cfg.runs > 1 {
		ok, err = hunt(ctx, cfg)
	} else {
		ok, err = ci(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "citest:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// goTest runs one go test -json and reads its events. ended, when set, is
// called for each package as it ends.
func goTest(ctx context.Context, cfg config, run string, pkgs []string, count1 bool, ended func(*runResult, *pkgResult)) (*runResult, error) {
	args := []string{"test", "-json", "-timeout", cfg.timeout.String()}
	if cfg.race {
		args = append(args, "-race")
	}
	if cfg.short {
		args = append(args, "-short")
	}
	if count1 {
		args = append(args, "-count=1")
	}
	if run != "" {
		args = append(args, "-run", run)
	}
	args = append(args, cfg.extra...)
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, cfg.goCmd, args...)
	cmd.Dir = cfg.dir
	cmd.Stderr = cfg.stderr
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var in io.Reader = out
	if cfg.jsonFile != "" {
		f, err := os.OpenFile(cfg.jsonFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = io.TeeReader(out, f)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := newRunResult()
	var onEnd func(*pkgResult)
	if ended != nil {
		onEnd = func(p *pkgResult) { ended(r, p) }
	}
	readErr := r.read(in, onEnd, func(line string) { fmt.Fprintln(cfg.stderr, line) })
	waitErr := cmd.Wait()
	if readErr != nil {
		return r, readErr
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	var exit *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exit) {
		return r, waitErr
	}
	// go test exits 1 when a test failed; anything else, or a failure no
	// package accounts for, is the go command failing (a flag, a pattern
	// that matches nothing, vet).
	if waitErr != nil && (exit.ExitCode() != 1 || len(r.failedPkgs()) == 0) {
		return r, fmt.Errorf("go %s: %v", strings.Join(args, " "), waitErr)
	}
	return r, nil
}

// printPkg prints one line per ended package, as go test does, with the
// output of a failed package's failed tests under it.
func printPkg(w io.Writer) func(*runResult, *pkgResult) {
	return func(r *runResult, p *pkgResult) {
		switch p.Action {
		case "pass":
			fmt.Fprintf(w, "ok   %s\t%.1fs\n", p.Name, p.Elapsed.Seconds())
		case "skip":
			// no test files
		case "fail":
			fmt.Fprintf(w, "FAIL %s\t%.1fs\n", p.Name, p.Elapsed.Seconds())
			fmt.Fprint(w, failureText(r, p))
		}
	}
}

// failureText is what a reader of a failed package needs: the build errors,
// or the last lines of each failed test, or of the package's own output.
func failureText(r *runResult, p *pkgResult) string {
	var b strings.Builder
	if p.BuildFailed {
		for path, t := range r.buildOut {
			if path == p.Name || strings.HasPrefix(path, p.Name+" ") || strings.HasPrefix(path, p.Name+".test") {
				b.WriteString(t.String())
			}
		}
		b.WriteString(p.out.String())
		return b.String()
	}
	leaves := p.failedLeaves()
	for _, t := range leaves {
		fmt.Fprintf(&b, "  --- FAIL %s (%.1fs)\n", t.Name, t.Elapsed.Seconds())
		b.WriteString(t.out.String())
	}
	for _, name := range p.order {
		if t := p.tests[name]; t.Action == "" {
			fmt.Fprintf(&b, "  --- never finished: %s\n", t.Name)
			b.WriteString(t.out.String())
		}
	}
	if len(leaves) == 0 || p.crashed() {
		b.WriteString("  package output:\n")
		b.WriteString(p.out.String())
	}
	return b.String()
}

// verdict is the fate of one failure of the first run.
type verdict struct {
	pkg   string
	test  string // a top-level test, or "" for the whole package
	first string // the first failure's last lines
	again string // the rerun's, when it failed too
	flaky bool
}

func (v verdict) name() string {
	if v.test == "" {
		return v.pkg + " (the whole package, rerun after its test binary died)"
	}
	return v.pkg + " " + v.test
}

// ci is one run with reruns. It reports false when anything failed twice or
// did not build.
func ci(ctx context.Context, cfg config) (bool, error) {
	start := time.Now()
	r, err := goTest(ctx, cfg, "", cfg.pkgs, false, printPkg(cfg.stdout))
	if err != nil {
		return false, err
	}
	var verdicts []verdict
	var broken []*pkgResult
	for _, p := range r.failedPkgs() {
		switch {
		case p.BuildFailed:
			broken = append(broken, p)
		case !cfg.rerun:
			verdicts = append(verdicts, verdict{pkg: p.Name, first: failureText(r, p)})
		case p.crashed():
			fmt.Fprintf(cfg.stdout, "rerun %s (its test binary died)\n", p.Name)
			v, err := rerun(ctx, cfg, verdict{pkg: p.Name, first: failureText(r, p)}, "")
			if err != nil {
				return false, err
			}
			verdicts = append(verdicts, v)
		default:
			for _, root := range p.failedRoots() {
				fmt.Fprintf(cfg.stdout, "rerun %s %s\n", p.Name, root)
				v, err := rerun(ctx, cfg, verdict{pkg: p.Name, test: root, first: rootFailureText(p, root)}, "^"+regexp.QuoteMeta(root)+"$")
				if err != nil {
					return false, err
				}
				verdicts = append(verdicts, v)
			}
		}
	}

	w := cfg.stdout
	if cfg.slowest > 0 {
		pkgs, tests := r.slowest(cfg.slowest)
		fmt.Fprintln(w, "\nslowest packages:")
		for _, t := range pkgs {
			fmt.Fprintf(w, "  %7.1fs  %s\n", t.Elapsed.Seconds(), t.Name)
		}
		fmt.Fprintln(w, "slowest tests:")
		for _, t := range tests {
			fmt.Fprintf(w, "  %7.1fs  %s\n", t.Elapsed.Seconds(), t.Name)
		}
	}
	failed, flaky := 0, 0
	for _, p := range broken {
		fmt.Fprintf(w, "\nBUILD FAILED: %s\n%s", p.Name, failureText(r, p))
	}
	for _, v := range verdicts {
		if v.flaky {
			continue
		}
		failed++
		fmt.Fprintf(w, "\nFAIL: %s\n  first try:\n%s", v.name(), v.first)
		if v.again != "" {
			fmt.Fprintf(w, "  second try:\n%s", v.again)
		}
	}
	for _, v := range verdicts {
		if v.flaky {
			flaky++
			fmt.Fprintf(w, "\nFLAKY: %s\n  first failure:\n%s", v.name(), v.first)
		}
	}
	pass, _, skip := r.counts()
	fmt.Fprintf(w, "\ncitest: %d packages, %d tests passed, %d skipped; %d failed twice, %d flaky (passed on a rerun), %d did not build; %s\n",
		len(r.pkgs), pass, skip, failed, flaky, len(broken), time.Since(start).Round(time.Second))
	return failed == 0 && len(broken) == 0, nil
}

// rerun runs v's package again, only the tests run matches ("" for all),
// and completes v: flaky when it passed (and v.test with it), the second
// failure otherwise. The error is the go command failing to run at all.
func rerun(ctx context.Context, cfg config, v verdict, run string) (verdict, error) {
	again, err := goTest(ctx, cfg, run, []string{v.pkg}, true, nil)
	if err != nil && again == nil {
		return v, err
	}
	ap := again.pkgs[v.pkg]
	passed := err == nil && ap != nil && ap.Action == "pass"
	if passed && v.test != "" {
		t := ap.tests[v.test]
		passed = t != nil && t.Action == "pass"
	}
	switch {
	case passed:
		v.flaky = true
	case ap != nil:
		v.again = failureText(again, ap)
	case err != nil:
		v.again = "    " + err.Error() + "\n"
	}
	return v, nil
}

// rootFailureText is the failure of one top-level test and its subtests.
func rootFailureText(p *pkgResult, root string) string {
	var b strings.Builder
	for _, t := range p.failedLeaves() {
		if t.Name == root || strings.HasPrefix(t.Name, root+"/") {
			fmt.Fprintf(&b, "  --- FAIL %s (%.1fs)\n", t.Name, t.Elapsed.Seconds())
			b.WriteString(t.out.String())
		}
	}
	if t := p.tests[root]; t != nil && t.Action == "" {
		fmt.Fprintf(&b, "  --- never finished: %s\n", root)
		b.WriteString(t.out.String())
	}
	return b.String()
}

// hunt runs the suite cfg.runs times and lists every test that failed.
func hunt(ctx context.Context, cfg config) (bool, error) {
	type record struct {
		fails int
		first string
	}
	records := map[string]*record{}
	var order []string
	note := func(key, text string) {
		rec, ok := records[key]
		if !ok {
			rec = &record{first: text}
			records[key] = rec
			order = append(order, key)
		}
		rec.fails++
	}
	for i := 1; i <= cfg.runs; i++ {
		start := time.Now()
		r, err := goTest(ctx, cfg, "", cfg.pkgs, true, nil)
		if err != nil && r == nil {
			return false, err
		}
		if err != nil {
			note("(go test) "+err.Error(), "")
		}
		n := 0
		for _, p := range r.failedPkgs() {
			switch {
			case p.BuildFailed:
				note(p.Name+" (build)", failureText(r, p))
				n++
			case p.crashed():
				note(p.Name+" (test binary died)", failureText(r, p))
				n++
			default:
				for _, t := range p.failedLeaves() {
					note(p.Name+" "+t.Name, rootFailureText(p, t.Name))
					n++
				}
			}
		}
		pass, _, _ := r.counts()
		fmt.Fprintf(cfg.stdout, "run %d/%d: %d tests passed, %d failures, %s\n", i, cfg.runs, pass, n, time.Since(start).Round(time.Second))
	}
	if len(order) == 0 {
		fmt.Fprintf(cfg.stdout, "citest: no test failed in %d runs\n", cfg.runs)
		return true, nil
	}
	fmt.Fprintf(cfg.stdout, "\ncitest: %d tests failed at least once in %d runs:\n", len(order), cfg.runs)
	for _, key := range order {
		fmt.Fprintf(cfg.stdout, "  %d/%d  %s\n", records[key].fails, cfg.runs, key)
	}
	for _, key := range order {
		fmt.Fprintf(cfg.stdout, "\n%s, first failure:\n%s", key, records[key].first)
	}
	return false, nil
}
