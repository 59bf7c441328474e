// Package brokertest starts real SemaQ brokers for tests: on 127.0.0.1 with
// a free port, data in a temporary directory, stopped at the end of the test.
package brokertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/internal/plugin/plugintest"
	"github.com/semaq/semaq/semaq"
)

// Start runs a broker for the test. Options adjust the configuration before
// it starts (the data directory, NATS and HTTP addresses are already set).
func Start(t testing.TB, opts ...func(*broker.Config)) *broker.Server {
	t.Helper()
	return StartWith(t, nil, opts...)
}

// StartWith is Start with broker options too (broker.WithQuotaClock, …).
func StartWith(t testing.TB, brokerOpts []broker.Option, opts ...func(*broker.Config)) *broker.Server {
	t.Helper()
	cfg := broker.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = "127.0.0.1:0"
	// Compiling a plugin takes seconds (tens under -race): every broker
	// of the tests shares the compiled code.
	cfg.PluginCacheDir = plugintest.CacheDir()
	for _, o := range opts {
		o(&cfg)
	}
	op, err := operator.New()
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	s, err := node.New(cfg, nil, append([]broker.Option{op.Option()}, brokerOpts...)...)
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	operators.Store(s, op)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("brokertest: start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		operators.Delete(s)
	})
	return s
}

// operators holds the operator of each broker Start made.
var operators sync.Map // *broker.Server → *operator.Operator

// DialOperator connects to s, a broker Start made, as its operator: every
// right, storage and JetStream's whole API included (broker.WithOperator).
// Tests use it to look below the semantic layer; the caller closes the
// connection.
func DialOperator(s *broker.Server, opts ...nats.Option) (*nats.Conn, error) {
	op, ok := operators.Load(s)
	if !ok {
		return nil, errors.New("brokertest: the broker was not started by brokertest.Start")
	}
	return op.(*operator.Operator).Connect(s.ClientURL(), opts...)
}

// Connect returns an SDK client of s, closed at the end of the test.
func Connect(t testing.TB, s *broker.Server) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, s.ClientURL())
	if err != nil {
		t.Fatalf("brokertest: connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// AddStream creates a stream and fails the test if it cannot.
func AddStream(t testing.TB, c *client.Client, name string, subjects ...string) *semaq.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := c.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: subjects})
	if err != nil {
		t.Fatalf("brokertest: add stream %s: %v", name, err)
	}
	return info
}

// WithAuth starts the broker with auth on: every NATS client needs a key
// of the identity store. AdminKey reads the key of the admin the broker
// made at start.
func WithAuth(cfg *broker.Config) { cfg.Auth = true }

// AdminKey is the key of the admin a broker started WithAuth created,
// read from its data directory.
func AdminKey(t testing.TB, s *broker.Server) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.Config().DataDir, broker.AdminKeyFile))
	if err != nil {
		t.Fatalf("brokertest: admin key: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// ConnectKey returns an SDK client of s authenticated with key, closed at
// the end of the test.
func ConnectKey(t testing.TB, s *broker.Server, key string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, s.ClientURL(), client.WithKey(key))
	if err != nil {
		t.Fatalf("brokertest: connect with key: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// StepClock is a clock for a node's time-driven parts (quotas): it moves
// only when the test says. Safe for concurrent use.
type StepClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewStepClock starts at 2026-01-01 00:00 UTC.
func NewStepClock() *StepClock { return &StepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

// Now is the clock's time.
func (c *StepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d.
func (c *StepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
