package benchcli

import (
	"strings"
	"testing"
)

// A full tokens run is TestBenchTokensTiny in internal/cli, through `semaq
// bench`; here only the flags are checked.
func TestBenchTokensErrors(t *testing.T) {
	t.Parallel()
	r := runBench("tokens", "--streams", "0")
	if r.code == 0 || !strings.Contains(r.stderr, "--streams 0") || !strings.HasPrefix(r.stderr, "semaq: ") {
		t.Fatalf("--streams 0: %+v", r)
	}
}
