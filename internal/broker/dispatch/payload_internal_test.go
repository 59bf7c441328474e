package dispatch

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jstest"
)

// A direct get is answered by any replica of the stream; one that is behind
// (a node catching up after a restart) answers 404 for a request the stream
// holds. The dispatcher must not take that for a request gone: it forgot
// such requests, which nobody was then handed (found by the process kill
// test of a queue's dispatching node, internal/proctest).
func TestPayloadReadDoesNotTrustALaggingReplica(t *testing.T) {
	nc, js := jstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// No direct gets of its own: the replica below is the only one.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg("q.a")
	msg.Header.Set("Semaq-Tenant", "t1")
	msg.Data = []byte(`{"prompt":"x"}`)
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	lagging, err := nc.Subscribe("$JS.API.DIRECT.GET.Q", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set("Status", "404")
		r.Header.Set("Description", "Message Not Found")
		_ = m.RespondMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer lagging.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := newPayloadReader(nc, "Q")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	got := r.read([]uint64{ack.Sequence, ack.Sequence + 1})
	if got[0].err != nil {
		t.Fatalf("a request the stream holds, 404 from a lagging replica: %v", got[0].err)
	}
	if string(got[0].data) != `{"prompt":"x"}` || got[0].hdr.Get("Semaq-Tenant") != "t1" {
		t.Fatalf("read back %q with headers %v", got[0].data, got[0].hdr)
	}
	if !errors.Is(got[1].err, errPayloadGone) {
		t.Fatalf("a sequence the stream does not hold: %v, want errPayloadGone", got[1].err)
	}
}

// Requests close together are read by batch gets of the runs they span:
// each comes back with its own headers and payload, whatever else the run
// holds (requests not asked for, deleted ones), in the order asked; one
// deleted is gone, and one far from the others is read alone.
func TestPayloadReadRuns(t *testing.T) {
	nc, js := jstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"}, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 40; i++ {
		msg := nats.NewMsg("q.a")
		msg.Header.Set("X-N", strconv.Itoa(i))
		msg.Data = []byte("payload " + strconv.Itoa(i))
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{4, 6, 7} {
		if err := st.DeleteMsg(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	r, err := newPayloadReader(nc, "Q")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	seqs := []uint64{9, 2, 3, 5, 8, 40, 4, 1, 30, 31, 33}
	got := r.read(seqs)
	for i, seq := range seqs {
		if seq == 4 {
			if !errors.Is(got[i].err, errPayloadGone) {
				t.Errorf("deleted request %d: %v, want errPayloadGone", seq, got[i].err)
			}
			continue
		}
		if got[i].err != nil {
			t.Errorf("request %d: %v", seq, got[i].err)
			continue
		}
		n := strconv.FormatUint(seq, 10)
		if string(got[i].data) != "payload "+n || got[i].hdr.Get("X-N") != n || got[i].hdr.Get("Nats-Sequence") != "" {
			t.Errorf("request %d read back as %q with headers %v", seq, got[i].data, got[i].hdr)
		}
	}
}
