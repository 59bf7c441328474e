package streams_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/streams"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

func TestOpenNamesMissingDeps(t *testing.T) {
	t.Parallel()
	_, err := streams.Open(context.Background(), streams.Deps{})
	if err == nil {
		t.Fatal("Open with no Deps succeeded")
	}
	for _, name := range []string{"JS", "Conn", "Gate", "Ingress", "SetQueues", "Principal", "Self", "Replicas",
		"Dispatch", "Remote", "DeleteLeases", "QueueMaxBytes"} {
		if !strings.Contains(err.Error(), "Deps."+name+" is required") {
			t.Errorf("error %q does not name Deps.%s", err, name)
		}
	}
}

func TestQueueConfigOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		meta  map[string]string
		queue bool
		semaq bool
	}{
		{"stream", map[string]string{reserved.MetadataVersion: "1"}, false, true},
		{"queue", map[string]string{reserved.MetadataVersion: "1", semaq.MetadataQueue: `{"max_messages":5}`}, true, true},
		{"garbled queue", map[string]string{reserved.MetadataVersion: "1", semaq.MetadataQueue: `{`}, false, true},
		{"bucket", nil, false, false},
	} {
		c := &jetstream.StreamConfig{Name: "S", Metadata: tc.meta}
		qc, ok := streams.QueueConfigOf(c)
		if ok != tc.queue || (ok && (qc.Name != "S" || qc.MaxMessages != 5)) {
			t.Errorf("%s: QueueConfigOf = %+v, %v; want a queue: %v", tc.name, qc, ok, tc.queue)
		}
		if got := streams.IsSemaqStream(c); got != tc.semaq {
			t.Errorf("%s: IsSemaqStream = %v, want %v", tc.name, got, tc.semaq)
		}
	}
}
