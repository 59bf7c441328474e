package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/wire"
)

// The ingress's connections (internal/broker/wire) and its shards.
//
// The ingress reads every public publish on one in-process connection (one
// subscription per stream pattern, queue group semaq.ingress). With one
// shard the connection's parsing goroutine runs the pipeline itself and
// republishes on the same connection: no hand-off per message, no header
// map from nats.go, one write per chunk of input. With n shards the reader only parses and
// hands each message to a shard by its ordering key; every shard runs the
// pipeline on its own goroutine and republishes on its own connection, so
// the server stores through n read loops instead of one.
//
// Order. A shard handles its messages in the order the reader got them,
// and the server stores what one connection publishes in that order. So
// whatever keeps one key on one shard keeps its order:
//
//   - a message with a reply subject is keyed by the reply up to its last
//     token: the inbox prefix of the publisher's connection (nats.go's
//     request inbox _INBOX.<id>.*, a JetStream context's async inbox), so
//     every acknowledged publish of one publisher stays in order, across
//     subjects too;
//   - a message with a reply the server mapped for another account (_R_.…,
//     a new prefix per message) or without a reply, sent through a user
//     account's import, is keyed by the connection the server names in
//     its Nats-Request-Info: every publish of one connection stays in
//     order;
//   - any other message is keyed by its subject: order per publisher and
//     subject.
//
// Before all of these, a message of a stock client's atomic batch
// (Nats-Batch-Id) is keyed by its batch id: a batch never splits across
// shards (stockbatch.go).
//
// With one shard (the default on two cores or fewer) every message of a
// connection keeps its order, as before sharding. With more, order between
// a node-account publisher's messages with and without a reply is not
// kept.

// shardQueue bounds the messages waiting for one shard; past it (or past
// pendingBytes over all shards) a message is dropped, as the
// subscription's pending limits dropped it before sharding: the publisher
// sees no ack and retries.
const shardQueue = 8192

// MaxShards bounds Deps.Shards.
const MaxShards = 64

// DefaultShards is one shard on two cores or fewer, where the
// ingress is bound by CPU and a hand-off costs more than it gains, and
// then one per two cores up to eight.
func DefaultShards() int {
	n := runtime.GOMAXPROCS(0)
	if n <= 2 {
		return 1
	}
	return min(n/2, 8)
}

type shard struct {
	in      *Ingress
	conn    *wire.Conn // publishes into storage
	scratch []byte     // the reader's or the shard goroutine's
	q       chan shardMsg
	stop    chan struct{} // closed by drainWire: handle what is queued, then end
	done    chan struct{}
}

// shardMsg is a message handed to a shard, copied out of the reader's
// buffer.
type shardMsg struct {
	st  *stream
	po  *pattern
	m   wire.Msg
	buf []byte // what m points into
}

// startWire connects the reader and the shards' connections.
func (in *Ingress) startWire(dial func(name string) (*wire.Conn, error), shards int) error {
	if shards <= 0 {
		shards = DefaultShards()
	}
	shards = min(shards, MaxShards)
	c, err := dial("semaq-ingress")
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	in.wire = c
	if shards == 1 {
		in.shards = []*shard{{in: in, conn: c}}
		return nil
	}
	for i := range shards {
		sc, err := dial(fmt.Sprintf("semaq-ingress-%d", i))
		if err != nil {
			in.closeWire()
			return fmt.Errorf("ingress: shard %d: %w", i, err)
		}
		sh := &shard{in: in, conn: sc, q: make(chan shardMsg, shardQueue), stop: make(chan struct{}), done: make(chan struct{})}
		in.shards = append(in.shards, sh)
		if !in.gate.Go(fmt.Sprintf("shard-%d", i), func(context.Context) { sh.run() }) {
			close(sh.done)
			in.closeWire()
			return errors.New("ingress: the node is shutting down")
		}
	}
	return nil
}

// receive is the reader's handler of every subscription.
func (in *Ingress) receive(st *stream, po *pattern, wm *wire.Msg) {
	if len(in.shards) == 1 {
		in.shards[0].deliver(st, po, wm)
		return
	}
	sh := in.shards[shardOf(wm, len(in.shards))]
	size := int64(len(wm.Subject) + len(wm.Reply) + len(wm.Header) + len(wm.Data))
	if in.queuedBytes.Add(size) > pendingBytes {
		in.queuedBytes.Add(-size)
		in.dropped.Add(1)
		return
	}
	buf := make([]byte, 0, size)
	buf = append(append(append(append(buf, wm.Subject...), wm.Reply...), wm.Header...), wm.Data...)
	ls, lr, lh := len(wm.Subject), len(wm.Reply), len(wm.Header)
	sm := shardMsg{st: st, po: po, buf: buf, m: wire.Msg{
		Subject: buf[:ls], Reply: buf[ls : ls+lr], Data: buf[ls+lr+lh:],
	}}
	if lh > 0 {
		sm.m.Header = buf[ls+lr : ls+lr+lh]
	}
	select {
	case sh.q <- sm:
	default:
		in.queuedBytes.Add(-size)
		in.dropped.Add(1)
	}
}

// shardOf picks a message's shard by its ordering key (see Order above):
// FNV-1a of the reply's inbox prefix, of the sending connection the
// server names in Nats-Request-Info, or of the subject.
func shardOf(wm *wire.Msg, n int) int {
	h := uint32(2166136261)
	hash := func(key []byte) {
		for _, c := range key {
			h ^= uint32(c)
			h *= 16777619
		}
	}
	if id := batchKey(wm.Header); id != nil {
		// A stock client's batch stays on one shard, in order.
		hash(id)
		return int(h % uint32(n))
	}
	r := wm.Reply
	switch mapped := len(r) >= len(mappedReplyPrefix) && string(r[:len(mappedReplyPrefix)]) == mappedReplyPrefix; {
	case len(r) > 0 && !mapped:
		key := r
		for i := len(r) - 1; i > 0; i-- {
			if r[i] == '.' {
				key = r[:i]
				break
			}
		}
		hash(key)
	default:
		if id, server := requestConn(wm.Header); id != nil {
			hash(id)
			hash(server)
		} else {
			hash(wm.Subject)
		}
	}
	return int(h % uint32(n))
}

// requestConn reads the connection a message came from out of its
// Nats-Request-Info header (set by the NATS server on every message
// through a user account's import): the connection's id and server, or
// nil when the header has none.
func requestConn(hdr []byte) (id, server []byte) {
	i := bytes.Index(hdr, requestInfoKey)
	if i < 0 {
		return nil, nil
	}
	line := hdr[i+len(requestInfoKey):]
	if j := bytes.IndexByte(line, '\r'); j >= 0 {
		line = line[:j]
	}
	id = jsonField(line, `"id":`, ',')
	server = jsonField(line, `"server":"`, '"')
	return id, server
}

var requestInfoKey = []byte(api.RequestInfoHeader + ":")

// jsonField is what follows key in line up to end: enough to read two
// fields of the server's own flat JSON, never a client's.
func jsonField(line []byte, key string, end byte) []byte {
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return nil
	}
	v := line[i+len(key):]
	if j := bytes.IndexByte(v, end); j >= 0 {
		v = v[:j]
	}
	return v
}

// run is a shard's goroutine: messages in order, a flush whenever the
// queue runs dry.
// The queue is never closed: a message the reader hands over after the
// stop stays in it, dropped with the shard.
func (sh *shard) run() {
	defer close(sh.done)
	for {
		select {
		case sm := <-sh.q:
			sh.handleQueued(sm)
		case <-sh.stop:
			for {
				select {
				case sm := <-sh.q:
					sh.handleQueued(sm)
				default:
					_ = sh.conn.Flush()
					return
				}
			}
		}
	}
}

func (sh *shard) handleQueued(sm shardMsg) {
	sh.deliver(sm.st, sm.po, &sm.m)
	sh.in.queuedBytes.Add(-int64(len(sm.buf)))
	if len(sh.q) == 0 {
		_ = sh.conn.Flush()
	}
}

// deliver turns a wire message into the pipeline's: subject, reply and
// header block become one string (one allocation; the header map's keys
// and values are substrings of it), the data stays where it is, valid
// until the pipeline returns.
func (sh *shard) deliver(st *stream, po *pattern, wm *wire.Msg) {
	ls, lr := len(wm.Subject), len(wm.Reply)
	sh.scratch = append(append(append(sh.scratch[:0], wm.Subject...), wm.Reply...), wm.Header...)
	s := string(sh.scratch)
	m := &nats.Msg{Subject: s[:ls], Reply: s[ls : ls+lr], Data: wm.Data}
	var hdrErr error
	if len(wm.Header) > 0 {
		m.Header, hdrErr = wire.DecodeHeader(s[ls+lr:])
	}
	if st == nil {
		sh.in.handleFrame(sh.conn, m, hdrErr)
		return
	}
	sh.in.handle(sh.conn, st, po, m, hdrErr)
}

// drainWire ends intake: every message the server delivered before the
// subscriptions ended is handled and its republish processed by the
// server. in.mu is held; the subscriptions are gone.
func (in *Ingress) drainWire(ctx context.Context) error {
	if in.wire == nil {
		return nil
	}
	var errs []error
	if err := in.wire.Ping(ctx); err != nil { // the reader has handled all it got
		errs = append(errs, fmt.Errorf("ingress: draining: %w", err))
	}
	for _, sh := range in.shards {
		if sh.q != nil {
			close(sh.stop)
			select {
			case <-sh.done:
			case <-ctx.Done():
				errs = append(errs, fmt.Errorf("ingress: draining shard: %w", ctx.Err()))
			}
		}
		if err := sh.conn.Ping(ctx); err != nil { // the server has what it published
			errs = append(errs, fmt.Errorf("ingress: draining: %w", err))
		}
	}
	return errors.Join(errs...)
}

// closeWire closes every connection of the ingress.
func (in *Ingress) closeWire() {
	if in.wire == nil {
		return
	}
	for _, sh := range in.shards {
		if sh.conn != in.wire {
			sh.conn.Close()
		}
	}
	in.wire.Close()
}

// The ingress's transports (Config.IngressTransport).
const (
	// Pipe connects the ingress through nats-server's in-process
	// connection, a synchronous pipe: the server's write of a delivery
	// waits until the ingress's reader takes it, and the ingress's write
	// of a republish until the server's reader does.
	Pipe = "pipe"
	// TCP connects it over loopback TCP to the client port: the
	// kernel's socket buffers stand between the two sides, so neither
	// waits for the other to be scheduled.
	TCP = "tcp"
)

// CheckTransport says what is wrong with transport t on a node
// whose client port has TLS (tls) or not.
func CheckTransport(t string, tls bool) error {
	switch t {
	case "", Pipe:
		return nil
	case TCP:
		if tls {
			return fmt.Errorf("%s needs a client port without TLS (tls_cert is set); use %s", TCP, Pipe)
		}
		return nil
	}
	return fmt.Errorf("%q is not %s or %s", t, Pipe, TCP)
}
