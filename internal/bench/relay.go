package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/wire"
)

// The relay of TargetJetStreamRelay. A SemaQ publish crosses one client
// more than a raw JetStream one: nats-server delivers it to the ingress,
// which publishes it again into the stream. The relay is that hop and
// nothing else: a wire.Conn like the ingress's, over the same transport,
// that receives each message on benchrelay.in.> and publishes it to
// benchrelay.stored.> with its reply subject (the stream's PubAck goes
// straight to the publisher, as through the ingress), its headers and its
// data. No validation, no routing, no metrics.

// Stream and subjects of the relay.
const (
	relayStream         = "BENCH_RELAY"
	relayInPrefix       = "benchrelay.in."
	relayStoredPrefix   = "benchrelay.stored."
	relaySubject        = relayInPrefix + "ingest"
	relayStoredSubject  = relayStoredPrefix + "ingest"
	relayStoredSubjects = relayStoredPrefix + ">"
	relayQueue          = "semaq-bench-relay"
)

// relayDialTimeout bounds the relay's TCP dial, as the ingress's.
const relayDialTimeout = 5 * time.Second

// relay is the relay's connection. Its handler runs on the connection's
// parsing goroutine, one message at a time.
type relay struct {
	conn *wire.Conn
	// transport is broker.IngressPipe or broker.IngressTCP: the broker's
	// ingress transport, so the hop measured is the ingress's.
	transport string
	scratch   []byte // the handler's
}

// startRelay creates the relay's stream on the broker, stored as the SemaQ
// stream is (its JetStream configuration copied, as createStreams copies
// it for the baseline), and starts the relay, logged in as the bench's
// operator over the broker's ingress transport. It returns once the server
// has the relay's subscription. The rig closes it.
func (r *Rig) startRelay(ctx context.Context) error {
	cfg, err := storedConfig(ctx, r, semaqStream)
	if err != nil {
		return err
	}
	c := rawConfig(cfg)
	c.Name, c.Description, c.Subjects = relayStream, "semaq bench: raw JetStream behind one client hop", []string{relayStoredSubjects}
	if err := createOperatorStream(ctx, r, c); err != nil {
		return err
	}

	rl := &relay{transport: r.Broker.IngressTransport()}
	dial := r.Broker.NATSServer().InProcessConn
	if rl.transport == broker.IngressTCP {
		addr := r.Broker.NATSServer().Addr().String() // the rig listens on 127.0.0.1
		dial = wire.TCPDial(addr, relayDialTimeout)
	}
	rl.conn, err = wire.Connect(wire.Config{Dial: dial, Name: "semaq-bench-relay", Nkey: r.op.PublicKey(), Sign: r.op.Sign})
	if err != nil {
		return fmt.Errorf("bench: relay: %w", err)
	}
	if _, err := rl.conn.QueueSubscribe(relayInPrefix+">", relayQueue, rl.forward); err != nil {
		rl.conn.Close()
		return fmt.Errorf("bench: relay: %w", err)
	}
	if err := rl.conn.Ping(ctx); err != nil {
		rl.conn.Close()
		return fmt.Errorf("bench: relay: subscribing: %w", err)
	}
	r.relay = rl
	return nil
}

// forward publishes m again under the stored prefix. Subject, reply and
// header block become one string, the headers are decoded only when
// present and encoded again by Publish: what the ingress does to every
// message before its own work. A message whose headers do not decode, or
// that cannot be published, is dropped: its publisher gets no ack and
// counts an error.
func (rl *relay) forward(m *wire.Msg) {
	rest := m.Subject[len(relayInPrefix):] // the subscription matched the prefix
	ls, lr := len(relayStoredPrefix)+len(rest), len(m.Reply)
	rl.scratch = append(append(append(append(rl.scratch[:0], relayStoredPrefix...), rest...), m.Reply...), m.Header...)
	s := string(rl.scratch)
	var h nats.Header
	if len(m.Header) > 0 {
		var err error
		if h, err = wire.DecodeHeader(s[ls+lr:]); err != nil {
			return
		}
	}
	_ = rl.conn.Publish(s[:ls], s[ls:ls+lr], h, m.Data)
}

// close writes what the relay has buffered and closes its connection.
func (rl *relay) close() { rl.conn.Close() }
