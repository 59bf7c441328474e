// Package wallclock is the wall-clock time SemaQ compares with times
// written by another node or another process: a lease record's end, a
// class slot's end, a claim's time. Such a comparison is only as good as
// the two clocks, unlike Go's monotonic readings (time.Since, t.Sub on two
// time.Now values), which no clock step reaches and which SemaQ uses for
// every duration it measures on its own.
//
// The fault harness (docs/faults.md) jumps one process's wall clock
// without touching the machine's: a node started with FileEnv set reads
// an offset from that file and adds it to Now from then on. Nothing else
// sets the offset.
package wallclock

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// FileEnv names the file whose offset (a Go duration: "90s", "-2m", "0s")
// is added to this process's wall clock, re-read every Poll. For fault
// injection only.
const FileEnv = "SEMAQ_FAULT_CLOCK_FILE"

// Poll is how often the offset file is read again.
const Poll = 100 * time.Millisecond

// maxOffset bounds an offset the file may give.
const maxOffset = 24 * time.Hour

var offset atomic.Int64 // nanoseconds

// Now is the wall-clock time as this process reads it, with no monotonic
// reading: Before, After and Sub on it compare wall clocks, as they must
// with a time another node wrote.
func Now() time.Time { return Of(time.Now()) }

// Of is t, a time.Now reading of this process, as its wall clock gives it
// (the offset added), with no monotonic reading.
func Of(t time.Time) time.Time { return t.Add(time.Duration(offset.Load())).Round(0) }

// Offset is the offset in force: zero unless a fault run set one.
func Offset() time.Duration { return time.Duration(offset.Load()) }

// Set sets the offset (tests of this package and of the harness's own
// processes; a node takes it from FileEnv).
func Set(d time.Duration) { offset.Store(int64(d)) }

// ParseOffset reads an offset file's content: a Go duration within a day
// either way.
func ParseOffset(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("clock offset: %w", err)
	}
	if d > maxOffset || d < -maxOffset {
		return 0, fmt.Errorf("clock offset %s: beyond %s either way", d, maxOffset)
	}
	return d, nil
}

// FromEnv follows the offset file FileEnv names, if set, until ctx ends:
// read once now (an error then is returned), then every Poll (a bad file
// then keeps the offset in force, logged once per change). No file means
// no offset.
func FromEnv(ctx context.Context, log *slog.Logger) error {
	path := os.Getenv(FileEnv)
	if path == "" {
		return nil
	}
	read := func() (time.Duration, error) {
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return 0, nil // no file (yet): no offset
		}
		if err != nil {
			return 0, err
		}
		return ParseOffset(string(b))
	}
	d, err := read()
	if err != nil {
		return fmt.Errorf("%s=%s: %w", FileEnv, path, err)
	}
	Set(d)
	log.Warn("fault injection: the wall clock SemaQ compares with other nodes' times follows an offset file", "file", path, "offset", d)
	go func() {
		t := time.NewTicker(Poll)
		defer t.Stop()
		var lastErr string
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d, err := read()
			switch {
			case err != nil && err.Error() != lastErr:
				lastErr = err.Error()
				log.Warn("clock offset file not read; the offset in force stays", "file", path, "err", err)
			case err == nil && d != Offset():
				lastErr = ""
				log.Warn("wall clock jumped (fault injection)", "offset", d, "was", Offset())
				Set(d)
			}
		}
	}()
	return nil
}
