package dispatch

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jstest"
)

// TestAckTracker: an ack the consumer confirms is done without a delete;
// one it refuses (a status), one with no delivery to ack, one not
// confirmed within ackTimeout and one still unconfirmed at close are
// deleted by sequence, then done with the delete's outcome. close returns
// once every delete is done.
func TestAckTracker(t *testing.T) {
	nc, _ := jstest.Start(t)
	// The consumer's side of the acks: confirmed, refused, never answered.
	for subj, h := range map[string]nats.MsgHandler{
		"ack.ok": func(m *nats.Msg) {
			if string(m.Data) != "+ACK" {
				t.Errorf("ack body %q", m.Data)
			}
			_ = m.Respond(nil)
		},
		"ack.refused": func(m *nats.Msg) {
			r := nats.NewMsg(m.Reply)
			r.Header.Set("Status", "503")
			_ = m.RespondMsg(r)
		},
		"ack.silent": func(*nats.Msg) {},
	} {
		if _, err := nc.Subscribe(subj, h); err != nil {
			t.Fatal(err)
		}
	}

	type outcome struct {
		seq uint64
		err error
	}
	var (
		mu      sync.Mutex
		removed []uint64
	)
	done := make(chan outcome, 8)
	errAway := errors.New("stream away")
	tr := newAckTracker(nc, subsystem.NewGate("test"), func(rm removal) error {
		if rm.reply != "" {
			t.Errorf("delete of %d by an ack to %q, want by sequence", rm.seq, rm.reply)
		}
		mu.Lock()
		removed = append(removed, rm.seq)
		mu.Unlock()
		if rm.seq == 4 {
			return errAway
		}
		return nil
	}, func(p *pendingAck, err error) { done <- outcome{p.rm.seq, err} })
	if _, err := nc.Subscribe(tr.subject(), tr.onReply); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	next := func(want outcome) {
		t.Helper()
		select {
		case got := <-done:
			if got.seq != want.seq || !errors.Is(got.err, want.err) {
				t.Fatalf("done %d (%v), want %d (%v)", got.seq, got.err, want.seq, want.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d never done", want.seq)
		}
	}
	pending := func() int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.pending)
	}

	tr.track(&pendingAck{rm: removal{seq: 1, reply: "ack.ok"}})
	next(outcome{1, nil})
	tr.track(&pendingAck{rm: removal{seq: 2, reply: "ack.refused"}})
	next(outcome{2, nil})
	tr.track(&pendingAck{rm: removal{seq: 3}})
	next(outcome{3, nil})

	tr.track(&pendingAck{rm: removal{seq: 4, reply: "ack.silent"}})
	tr.expire(time.Now())
	if n := pending(); n != 1 {
		t.Fatalf("%d acks pending before their time is up, want 1", n)
	}
	tr.expire(time.Now().Add(ackTimeout + time.Second))
	next(outcome{4, errAway})
	if n := pending(); n != 0 {
		t.Fatalf("%d acks pending after they expired", n)
	}

	tr.track(&pendingAck{rm: removal{seq: 5, reply: "ack.silent"}})
	tr.close()
	select {
	case got := <-done:
		if got.seq != 5 || got.err != nil {
			t.Fatalf("close: done %d (%v), want 5", got.seq, got.err)
		}
	default:
		t.Fatal("close returned before the unconfirmed ack was deleted")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []uint64{2, 3, 4, 5}; !slices.Equal(removed, want) {
		t.Fatalf("deleted by sequence %v, want %v", removed, want)
	}
}
