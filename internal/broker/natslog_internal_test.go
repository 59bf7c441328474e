package broker

import (
	"log/slog"
	"strings"
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
