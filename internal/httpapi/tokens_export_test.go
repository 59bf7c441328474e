package httpapi

import (
	"testing"
	"time"
)

// SetTokenFirstRecordWait shortens the wait for a known stream's first
// record for the test; tests that call it must not run in parallel with
// ones that read empty token streams.
func SetTokenFirstRecordWait(t testing.TB, d time.Duration) {
	old := tokenFirstRecordWait.Swap(int64(d))
	t.Cleanup(func() { tokenFirstRecordWait.Store(old) })
}
