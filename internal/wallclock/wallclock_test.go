package wallclock

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseOffset(t *testing.T) {
	for in, want := range map[string]time.Duration{"90s": 90 * time.Second, " -2m\n": -2 * time.Minute, "0s": 0, "+1h": time.Hour} {
		if got, err := ParseOffset(in); err != nil || got != want {
			t.Errorf("ParseOffset(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "25h", "-48h"} {
		if _, err := ParseOffset(in); err == nil || !strings.Contains(err.Error(), "clock offset") {
			t.Errorf("ParseOffset(%q): %v, want an error naming the clock offset", in, err)
		}
	}
}

// TestFromEnvFollowsTheFile: the offset file's jumps reach Now while the
// monotonic clock, which measures durations, is untouched.
func TestFromEnvFollowsTheFile(t *testing.T) {
	t.Cleanup(func() { Set(0) })
	path := filepath.Join(t.TempDir(), "clock")
	write := func(s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write("90s")
	t.Setenv(FileEnv, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := FromEnv(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	if Offset() != 90*time.Second {
		t.Fatalf("offset %s after start, want 90s", Offset())
	}
	before := time.Now()
	if ahead := Now().Sub(before); ahead < 89*time.Second || ahead > 91*time.Second {
		t.Fatalf("Now is %s ahead, want 90s", ahead)
	}
	if d := time.Since(before); d > time.Second {
		t.Fatalf("the monotonic clock moved %s", d)
	}
	wait := func(want time.Duration) {
		t.Helper()
		deadline := time.Now().Add(20 * Poll)
		for Offset() != want {
			if time.Now().After(deadline) {
				t.Fatalf("offset %s, want %s", Offset(), want)
			}
			time.Sleep(Poll / 4) // polling a condition
		}
	}
	write("-2m")
	wait(-2 * time.Minute)
	write("tomorrow") // a bad file keeps the offset in force
	write("0s")
	wait(0)

	t.Setenv(FileEnv, filepath.Join(t.TempDir(), "bad"))
	if err := os.WriteFile(os.Getenv(FileEnv), []byte("48h"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := FromEnv(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), FileEnv) {
		t.Fatalf("a bad offset file at start: %v, want an error naming %s", err, FileEnv)
	}
}
