package dispatch

// The acks of done jobs on their way out of the stream: an ack to the
// consumer's delivery, confirmed by JetStream on an inbox of the
// dispatcher's, or a delete by sequence when it is not.

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// ackTimeout bounds the wait for JetStream to confirm an ack to the
// consumer; past it the request is deleted by sequence instead.
const ackTimeout = 2 * time.Second

// ackBody acks a delivery of the dispatcher's consumer.
var ackBody = []byte("+ACK")

// pendingAck is a worker's ack of j whose removal from the stream
// JetStream has not confirmed yet.
type pendingAck struct {
	m     *nats.Msg // the worker's answer, replied to once confirmed
	j     *sched.Job
	rm    removal
	rep   semaq.JobAckReport
	until time.Time // past it, the request is deleted by sequence instead
}

// ackTracker takes acked jobs out of the stream (track) and hands each to
// done once JetStream has confirmed its removal, or failed to. The ack to
// the consumer's delivery goes out with a reply subject of its own
// (prefix + id, under reserved.IngressAckInbox), and the confirmation is
// handled in that subscription's callback (onReply): no goroutine,
// request or timer per ack. An ack not confirmed within ackTimeout
// (expire), answered with an error status, or with no delivery of the
// current consumer to ack, is deleted by sequence instead, on a goroutine
// of the gate's (remove, then done).
//
// Locking: mu guards next and pending only, and is a leaf: it is never
// held while publishing or calling remove or done, and the dispatcher
// takes it with none of its own locks held. remove and done are called
// with no lock held; done may take Dispatcher.mu. Its methods are safe for
// concurrent use; close runs once no callback of the connection does.
type ackTracker struct {
	nc     *nats.Conn // internal: the acks and their replies
	gate   *subsystem.Gate
	prefix string // of the acks' reply subjects: prefix + id
	// remove takes a request out of the stream by sequence (removal with
	// no reply) and returns once JetStream confirms it; done finishes an
	// ack, err being remove's (nil once JetStream confirmed the ack).
	remove func(removal) error
	done   func(p *pendingAck, err error)

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*pendingAck // by id, the last token of the reply subject

	// deleting counts the deletes by sequence in flight: close waits for
	// them.
	deleting sync.WaitGroup
}

// newAckTracker is the ack tracker of a dispatcher whose internal
// connection is nc and whose goroutines run on gate.
func newAckTracker(nc *nats.Conn, gate *subsystem.Gate, remove func(removal) error, done func(*pendingAck, error)) *ackTracker {
	return &ackTracker{
		nc:      nc,
		gate:    gate,
		prefix:  reserved.IngressAckInbox + nuid.Next() + ".",
		remove:  remove,
		done:    done,
		pending: make(map[uint64]*pendingAck),
	}
}

// subject is what the tracker's subscription listens on (onReply).
func (t *ackTracker) subject() string { return t.prefix + "*" }

// track acks p's delivery to the consumer (p.rm.reply), or deletes its
// request by sequence when there is no delivery to ack or the ack cannot
// be sent; done hears the outcome either way.
func (t *ackTracker) track(p *pendingAck) {
	if p.rm.reply != "" {
		p.until = time.Now().Add(ackTimeout)
		t.mu.Lock()
		t.next++
		id := t.next
		t.pending[id] = p
		t.mu.Unlock()
		if t.nc.PublishRequest(p.rm.reply, t.prefix+strconv.FormatUint(id, 10), ackBody) == nil {
			return
		}
		t.mu.Lock()
		delete(t.pending, id)
		t.mu.Unlock()
	}
	t.deleteBySeq(p)
}

// deleteBySeq removes p's request by sequence, on a goroutine of its own,
// then hands it to done.
func (t *ackTracker) deleteBySeq(p *pendingAck) {
	t.deleting.Add(1)
	if !t.gate.Go("ack-delete", func(context.Context) {
		defer t.deleting.Done()
		t.done(p, t.remove(removal{seq: p.rm.seq}))
	}) {
		t.deleting.Done() // the node is stopping: close deletes what is unconfirmed
	}
}

// onReply is JetStream's answer to an ack track sent: an empty message
// once the request has left the stream; a status (503: the consumer is
// gone) otherwise.
func (t *ackTracker) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[len(t.prefix):], 10, 64)
	if err != nil {
		return
	}
	t.mu.Lock()
	p := t.pending[id]
	delete(t.pending, id)
	t.mu.Unlock()
	switch {
	case p == nil: // past its time: expire has it deleted
	case m.Header.Get("Status") != "":
		t.deleteBySeq(p)
	default:
		t.done(p, nil)
	}
}

// expire deletes by sequence the requests whose ack JetStream has not
// confirmed by now. It runs on the dispatcher's loop.
func (t *ackTracker) expire(now time.Time) { t.expireIf(now, false) }

// close deletes by sequence every request whose ack is unconfirmed (its
// confirmation will not be heard) and waits for every delete. It runs in
// Dispatcher.Close, once no callback of the connection runs.
func (t *ackTracker) close() {
	t.expireIf(time.Time{}, true)
	t.deleting.Wait()
}

func (t *ackTracker) expireIf(now time.Time, all bool) {
	var late []*pendingAck
	t.mu.Lock()
	for id, p := range t.pending {
		if all || now.After(p.until) {
			late = append(late, p)
			delete(t.pending, id)
		}
	}
	t.mu.Unlock()
	for _, p := range late {
		t.deleteBySeq(p)
	}
}
