package audit

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkRecord is the cost of one audit record (a stream.create with
// a stream configuration before and after) against raw JetStream's
// synchronous publish of the same bytes to a file stream, in the same
// run: report the ratio.
func BenchmarkRecord(b *testing.B) {
	nc, js := jstest.Start(b)
	ctx := context.Background()
	l, err := Open(ctx, Deps{JS: js, Conn: nc})
	if err != nil {
		b.Fatal(err)
	}
	cfg := semaq.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Retention: "limits", Storage: "file", Replicas: 1, Duplicates: 2 * time.Minute}
	rec := semaq.AuditRecord{Time: time.Now(), Node: "n1", Principal: semaq.AuditPrincipal{Who: "user", User: "admin", Role: "admin"},
		Op: semaq.AuditOpStreamCreate, Target: "ORDERS", Outcome: semaq.AuditOK, After: Value(cfg)}
	raw, _ := json.Marshal(rec)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RAW", Subjects: []string{"raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	b.Run("raw-jetstream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := js.Publish(ctx, "raw.stream.create", raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("audit-record", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Record(ctx, rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
