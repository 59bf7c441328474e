package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// ingress is the semantic layer's write path. It holds one queue-group
// subscription per public subject pattern of every stream; each message is
// validated, normalised and republished into the reserved storage namespace
// with the publisher's reply subject, so JetStream acknowledges the
// publisher directly and the ingress never waits on storage.
//
// Per-publisher order holds because one subscription delivers a publisher's
// messages in order and the ingress republishes them in that order on one
// connection.
type ingress struct {
	nc   *nats.Conn
	log  *slog.Logger
	opts semaq.NormalizeOptions

	mu      sync.Mutex
	streams map[string]*ingressStream // by stream name

	accepted atomic.Uint64
	rejected atomic.Uint64
}

type ingressStream struct {
	subjects []string
	subs     []*nats.Subscription
}

// Pending limits of an ingress subscription. Past them NATS drops messages
// (the publisher sees no ack and retries), which is the backpressure a flood
// gets instead of unbounded memory.
const (
	ingressPendingMsgs  = 1 << 20
	ingressPendingBytes = 512 << 20
)

func newIngress(nc *nats.Conn, log *slog.Logger, maxHeaderBytes int) *ingress {
	return &ingress{
		nc:      nc,
		log:     log,
		opts:    semaq.NormalizeOptions{MaxHeaderBytes: maxHeaderBytes, Stamp: true},
		streams: make(map[string]*ingressStream),
	}
}

// set makes the ingress serve stream name on subjects, replacing what it
// served for that stream before.
func (in *ingress) set(name string, subjects []string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if cur, ok := in.streams[name]; ok {
		if slices.Equal(cur.subjects, subjects) {
			return nil
		}
		cur.unsubscribe()
		delete(in.streams, name)
	}
	st := &ingressStream{subjects: slices.Clone(subjects)}
	for _, subj := range subjects {
		sub, err := in.nc.QueueSubscribe(subj, semaq.IngressQueueGroup, in.handle)
		if err != nil {
			st.unsubscribe()
			return fmt.Errorf("ingress: subscribing to %s: %w", subj, err)
		}
		if err := sub.SetPendingLimits(ingressPendingMsgs, ingressPendingBytes); err != nil {
			st.unsubscribe()
			return fmt.Errorf("ingress: %w", err)
		}
		st.subs = append(st.subs, sub)
	}
	// Make sure the server has the interest before a caller reports the
	// stream as ready: a publish right after "stream add" must not find
	// no responders.
	if err := in.nc.Flush(); err != nil {
		st.unsubscribe()
		return fmt.Errorf("ingress: %w", err)
	}
	in.streams[name] = st
	in.log.Debug("serving stream", "stream", name, "subjects", subjects)
	return nil
}

// remove stops serving stream name.
func (in *ingress) remove(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.streams[name]; ok {
		st.unsubscribe()
		delete(in.streams, name)
		in.log.Debug("stopped serving stream", "stream", name)
	}
}

// names returns the streams served.
func (in *ingress) names() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]string, 0, len(in.streams))
	for n := range in.streams {
		out = append(out, n)
	}
	return out
}

func (st *ingressStream) unsubscribe() {
	for _, sub := range st.subs {
		_ = sub.Unsubscribe()
	}
	st.subs = nil
}

// handle is the hot path: it runs once per published message.
func (in *ingress) handle(m *nats.Msg) {
	if m.Header == nil {
		m.Header = make(nats.Header, 1)
	}
	if _, err := semaq.Normalize(m.Header, time.Now(), in.opts); err != nil {
		in.reject(m, semaq.NewAPIError(semaq.ErrEnvelope, "%s", err.Error()))
		return
	}
	out := nats.Msg{Subject: semaq.StoragePrefix + m.Subject, Reply: m.Reply, Header: m.Header, Data: m.Data}
	if err := in.nc.PublishMsg(&out); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			in.reject(m, semaq.NewAPIError(semaq.ErrTooLarge, "message on %s is too large with its envelope: %d bytes of data, server limit %d",
				m.Subject, len(m.Data), in.nc.MaxPayload()))
			return
		}
		in.reject(m, semaq.NewAPIError(semaq.ErrUnavailable, "storing message on %s: %v", m.Subject, err))
		return
	}
	in.accepted.Add(1)
}

func (in *ingress) reject(m *nats.Msg, e *semaq.APIError) {
	in.rejected.Add(1)
	if m.Reply == "" {
		in.log.Debug("rejected message without reply subject", "subject", m.Subject, "err", e.Description)
		return
	}
	_ = in.nc.Publish(m.Reply, semaq.MarshalError(e))
}
