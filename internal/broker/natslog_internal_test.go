package broker

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

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
	if n := logs.Lines("Subscription Violation"); n != 4 {
		t.Fatalf("the server's refusals logged %d times, want 4:\n%s", n, logs.String())
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
