package broker

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/logtest"
)

// The NATS server's refusal of a shared-inbox subscription is followed,
// once a second at most, by a line saying what the client must change.
func TestNATSLoggerHintsAtTheUsersInbox(t *testing.T) {
	var logs logtest.Buffer
	l := &natsLogger{log: slog.New(slog.NewTextHandler(&logs, nil))}
	for range 3 {
		l.Errorf("%s - Subscription Violation - Subject %q, SID %s", "127.0.0.1:5 - cid:7", "_INBOX.abc.*", "1")
	}
	l.Errorf("%s - Subscription Violation - Subject %q, SID %s", "127.0.0.1:5 - cid:7", "orders.>", "2")
	// A client's refusals are info, once a second per kind.
	if n := logs.Lines("Subscription Violation"); n != 1 || logs.Lines("level=ERROR") != 0 {
		t.Fatalf("the server's refusals logged %d times (want once, at info):\n%s", n, logs.String())
	}
	if n := logs.Lines("_INBOX_<user>"); n != 1 {
		t.Fatalf("the inbox hint logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "CustomInboxPrefix") {
		t.Fatalf("the hint does not name the client option:\n%s", logs.String())
	}
}

// A busy cluster port is told as one: the error the start fails with
// wraps the listener's, so a caller can pick another port.
func TestNATSLoggerFatalWrapsTheListenError(t *testing.T) {
	var logs logtest.Buffer
	l := &natsLogger{log: slog.New(slog.NewTextHandler(&logs, nil)), fatal: make(chan error, 1)}
	busy := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	l.Fatalf("Error listening on router port: %d - %v", 46109, busy)
	err := <-l.fatal
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "router port") {
		t.Fatalf("fatal error %v: want the router port's words wrapping EADDRINUSE", err)
	}
}

// Errors an operator need not act on are not errors: a client's bad key or
// refused publish, a route to a peer that is starting, a rejoining node's
// routine warnings. A route that still fails after the grace is an error.
func TestNATSLoggerKeepsErrorsForOperators(t *testing.T) {
	var logs logtest.Buffer
	l := &natsLogger{log: slog.New(slog.NewTextHandler(&logs, nil)), started: time.Now()}
	l.Errorf("%s - authentication error - User %q", "127.0.0.1:9 - cid:3", "bob")
	l.Errorf("%s - Publish Violation - User %q, Subject %q", "127.0.0.1:9 - cid:4", "bob", "$SQ.x")
	l.Errorf("Error trying to connect to route (attempt %v): %v", 1, errors.New("connection refused"))
	l.Warnf("Did not receive all stream info results for %q", "$G")
	if n := logs.Lines("level=ERROR") + logs.Lines("level=WARN"); n != 0 {
		t.Fatalf("%d lines at warn or error:\n%s", n, logs.String())
	}
	if logs.Lines("level=INFO") != 4 {
		t.Fatalf("want each at info:\n%s", logs.String())
	}
	l.started = time.Now().Add(-2 * routeGrace)
	l.Errorf("Error trying to connect to route (attempt %v): %v", 9, errors.New("connection refused"))
	if logs.Lines("level=ERROR") != 1 {
		t.Fatalf("a route failing past the grace is not an error:\n%s", logs.String())
	}
}
