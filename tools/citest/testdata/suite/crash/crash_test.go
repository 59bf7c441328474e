// Package crash panics on the first try of a run; the test after the panic
// never runs then.
package crash

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCrash(t *testing.T) {
	marker := filepath.Join(os.Getenv("CITEST_STATE"), "crash.tried")
	if _, err := os.Stat(marker); err != nil {
		os.WriteFile(marker, nil, 0o644)
		panic("boom on the first try")
	}
}

func TestAfter(t *testing.T) {}
