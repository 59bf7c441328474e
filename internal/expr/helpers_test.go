package expr

import (
	"sync"
	"testing"
)

var (
	envOnce   sync.Once
	sharedEnv *Env
	envErr    error
)

// testEnv returns one Env for the whole test binary: building one costs a
// few milliseconds, and sharing it exercises the cache across tests.
func testEnv(tb testing.TB) *Env {
	tb.Helper()
	envOnce.Do(func() { sharedEnv, envErr = NewEnv() })
	if envErr != nil {
		tb.Fatal(envErr)
	}
	return sharedEnv
}
