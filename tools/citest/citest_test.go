package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// suite runs citest over testdata/suite, a module whose tests fail on their
// first try (flaky), always (broken), crash their binary once (crash) or do
// not build (nobuild).
func suite(t *testing.T, runs int, pkgs ...string) (string, bool) {
	t.Helper()
	t.Setenv("CITEST_STATE", t.TempDir())
	var out bytes.Buffer
	cfg := config{
		dir: filepath.Join("testdata", "suite"), goCmd: "go", timeout: 2 * time.Minute,
		runs: runs, rerun: true, slowest: 3, pkgs: pkgs, stdout: &out, stderr: &out,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ok bool
	var err error
	if runs > 1 {
		ok, err = hunt(ctx, cfg)
	} else {
		ok, err = ci(ctx, cfg)
	}
	if err != nil {
		t.Fatalf("citest: %v\n%s", err, out.String())
	}
	return out.String(), ok
}

func TestFlakyTestsPassTheRun(t *testing.T) {
	out, ok := suite(t, 1, "./pass", "./flaky", "./crash")
	if !ok {
		t.Fatalf("a run whose failures all passed on a rerun failed:\n%s", out)
	}
	for _, want := range []string{
		"FLAKY: example.com/suite/flaky TestFlaky\n",
		"first try fails: timing",
		"the setup said this",
		"FLAKY: example.com/suite/flaky TestSub\n",
		"inner first try fails",
		"FLAKY: example.com/suite/crash (the whole package",
		"boom on the first try",
		"rerun example.com/suite/flaky TestFlaky\n",
		"0 failed twice, 3 flaky",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rerun example.com/suite/flaky TestSteady") {
		t.Errorf("a test that passed was rerun:\n%s", out)
	}
	if strings.Contains(out, "=== RUN") {
		t.Errorf("framing lines in the report:\n%s", out)
	}
}

func TestTwiceFailedAndUnbuiltFailTheRun(t *testing.T) {
	out, ok := suite(t, 1, "./pass", "./broken", "./nobuild")
	if ok {
		t.Fatalf("a run with a test failing twice and a package not building passed:\n%s", out)
	}
	for _, want := range []string{
		"FAIL: example.com/suite/broken TestAlways\n",
		"always fails: a real bug",
		"second try:",
		"BUILD FAILED: example.com/suite/nobuild",
		"undefinedCall",
		"1 failed twice, 0 flaky (passed on a rerun), 1 did not build",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rerun example.com/suite/broken TestFine") {
		t.Errorf("a test that passed was rerun:\n%s", out)
	}
}

func TestHuntCountsFailures(t *testing.T) {
	out, ok := suite(t, 2, "./pass", "./flaky")
	if ok {
		t.Fatalf("the hunt found nothing:\n%s", out)
	}
	for _, want := range []string{
		"1/2  example.com/suite/flaky TestFlaky\n",
		"1/2  example.com/suite/flaky TestSub/inner\n",
		"first try fails: timing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTailKeepsTheLastLines(t *testing.T) {
	var tl tail
	for i := 0; i < tailLines+5; i++ {
		tl.write("line\n")
	}
	tl.write("=== RUN   TestX\n")
	tl.write("half ")
	tl.write("done")
	got := tl.String()
	if !strings.Contains(got, "(5 earlier lines not kept)") || !strings.HasSuffix(got, "    half done\n") {
		t.Fatalf("tail:\n%s", got)
	}
	if strings.Contains(got, "=== RUN") {
		t.Fatalf("framing line kept:\n%s", got)
	}
}
