package audit

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// FuzzOpFilter: whatever op a client names, the consumer filter is an
// operation's own subject or a family's, never a wildcard the client
// chose nor a subject outside SQ_AUDIT.
func FuzzOpFilter(f *testing.F) {
	for _, s := range append([]string{"", "stream", "schema.config", "*", ">", "stream.*", "stream.>", "str", ".", "stream.", " stream"}, semaq.AuditOps...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, op string) {
		filter, err := opFilter(op)
		if err != nil {
			if !strings.Contains(err.Error(), "is not an operation") {
				t.Fatalf("op %q: unclear error %v", op, err)
			}
			return
		}
		rest, ok := strings.CutPrefix(filter, reserved.AuditPrefix)
		if !ok {
			t.Fatalf("op %q: filter %q outside SQ_AUDIT", op, filter)
		}
		family, wild := strings.CutSuffix(rest, ".>")
		switch {
		case op == "":
			if rest != ">" {
				t.Fatalf("no op: filter %q", filter)
			}
		case wild:
			if family != op || strings.ContainsAny(family, "*> ") {
				t.Fatalf("op %q: filter %q", op, filter)
			}
		default:
			if rest != op || checkOp(op) != nil {
				t.Fatalf("op %q: filter %q", op, filter)
			}
		}
	})
}
