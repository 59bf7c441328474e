package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// startErr starts a broker with cfg and returns Start's error, stopping
// the broker if it started.
func startErr(t *testing.T, cfg broker.Config) (time.Duration, error) {
	t.Helper()
	s, err := broker.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	begin := time.Now()
	err = s.Start(ctx)
	took := time.Since(begin)
	if err == nil {
		t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	}
	return took, err
}

func TestDataDirLockedBySecondNode(t *testing.T) {
	dir := t.TempDir()
	first := brokertest.Start(t, func(c *broker.Config) { c.DataDir = dir })

	cfg := first.Config()
	cfg.Listen, cfg.HTTP = "127.0.0.1:0", "127.0.0.1:0"
	took, err := startErr(t, cfg)
	if !errors.Is(err, broker.ErrDataDirInUse) {
		t.Fatalf("second node on %s: err %v, want ErrDataDirInUse", dir, err)
	}
	for _, want := range []string{dir, fmt.Sprintf("pid %d", os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took > 5*time.Second {
		t.Errorf("refused after %s; want at once", took)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); err != nil {
		t.Fatalf("first node's store: %v", err)
	}

	// Released at shutdown: the directory can be opened again.
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := startErr(t, cfg); err != nil {
		t.Fatalf("start after the first node stopped: %v", err)
	}
}

func TestNATSPortBusyFailsAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := broker.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = ln.Addr().String()
	cfg.HTTP = "127.0.0.1:0"
	took, err := startErr(t, cfg)
	if err == nil {
		t.Fatalf("started on busy port %s", cfg.Listen)
	}
	if !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), cfg.Listen) {
		t.Errorf("error %q: want the bind error naming %s", err, cfg.Listen)
	}
	if took > 5*time.Second {
		t.Errorf("failed after %s; want at once", took)
	}
	// The failed start released the data directory.
	cfg.Listen = "127.0.0.1:0"
	if _, err := startErr(t, cfg); err != nil {
		t.Fatalf("start on the same data directory after the failure: %v", err)
	}
}
