package brokertest

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Main runs a package's tests with up to parallel tests marked
// t.Parallel at once, unless -test.parallel was given. Brokers under test
// mostly wait (a cluster electing its leaders, a lease lapsing, a health
// window closing) rather than compute, so more of them than cores run at
// once without starving each other; the default, one per core, leaves the
// package's wall time to its slowest waits in a row. cleanups run after
// the tests (os.Exit skips deferred calls). Call it from TestMain:
//
//	func TestMain(m *testing.M) { brokertest.Main(m, 4) }
func Main(m *testing.M, parallel int, cleanups ...func()) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			given = true
		}
	})
	if !given {
		// The testing package's own flag, read when m.Run starts: setting
		// it cannot fail, and if it did the default would only be slower.
		_ = flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	os.Exit(code)
}
