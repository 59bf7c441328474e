package bench

import (
	"context"
	"os"
	"testing"
)

// TestMain lets the test binary stand in for the bench binary: the
// processes mode of the dispatch benchmark runs os.Executable with
// DispatchChildCommand, which is this binary under test.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == DispatchChildCommand {
		os.Exit(DispatchChildMain(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
