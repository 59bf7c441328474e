package benchcli

import (
	"os"
	"testing"

	"github.com/semaq/semaq/internal/bench/dispatch"
)

// TestMain lets the test binary stand in for semaq-bench when the dispatch
// benchmark's processes mode runs it (os.Executable) as a child, through
// the same hidden command.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == dispatch.ChildCommand {
		os.Exit(Main(Name, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
