package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/bench"
)

// TestMain lets the test binary stand in for the bench binary: the
// processes mode of the dispatch benchmark runs os.Executable with
// ChildCommand, which is this binary under test. With
// envTestParent set it is instead a bench parent that tests kill.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ChildCommand {
		os.Exit(ChildMain(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	if dir := os.Getenv(envTestParent); dir != "" {
		os.Exit(runTestParent(dir))
	}
	os.Exit(m.Run())
}

// envTestParent names the data directory of a bench parent run by a test.
const envTestParent = "SEMAQ_BENCH_TEST_PARENT"

// runTestParent runs a processes-mode priority phase of ten minutes,
// printing its children's pids as a JSON line once they are ready, for a
// test to kill it.
func runTestParent(dir string) int {
	ctx := context.Background()
	srv, op, err := startDispatchBroker(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := DefaultConfig()
	cfg.Processes, cfg.Duration = true, 10*time.Minute
	d := &dispatchRun{cfg: cfg, srv: srv, op: op, data: textPayload(cfg.Size)}
	d.onChildren = func(pids []int) {
		b, _ := json.Marshal(pids)
		fmt.Println(string(b))
	}
	err = d.priority(ctx, &bench.DispatchReport{})
	fmt.Fprintln(os.Stderr, "phase ended:", err)
	return 1
}
