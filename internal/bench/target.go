package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

// Streams and subjects of the ingest scenario.
const (
	semaqStream      = "BENCH_SEMAQ"
	semaqSubjects    = "bench.semaq.>"
	semaqSubject     = "bench.semaq.ingest"
	noSchemaStream   = "BENCH_NOSCHEMA"
	noSchemaSubjects = "bench.noschema.>"
	noSchemaSubject  = "bench.noschema.ingest"
	JetStreamStream  = "BENCH_RAW"
	// The ceiling's streams (TargetSemaqInterval, TargetJetStreamInterval).
	semaqIntervalStream       = "BENCH_SEMAQ_INTERVAL"
	semaqIntervalSubjects     = "bench.semaqint.>"
	semaqIntervalSubject      = "bench.semaqint.ingest"
	jetstreamIntervalStream   = "BENCH_RAW_INTERVAL"
	jetstreamIntervalSubject  = "benchrawint.ingest"
	jetstreamIntervalSubjects = "benchrawint.>"
	jetstreamSubject          = "benchraw.ingest"
	// The raw stream lives outside the reserved $SQ namespace, as a plain
	// JetStream user's would.
	jetstreamSubjects = "benchraw.>"
)

// Target is one way of getting a message into a stream.
type Target struct {
	Name    string
	subject string // what publishers publish on
	// Stream is the SemaQ Stream behind the ingress; empty for the raw
	// baseline.
	Stream string
	// Dial opens a publisher connection over loopback TCP.
	Dial func(r *Rig, name string) (*nats.Conn, error)
	// jsStream and stored are the JetStream stream and the subject a
	// target without a SemaQ Stream stores under, where they are not the
	// baseline's stream and the subject published on (the relay's,
	// jetstream-interval's stream).
	jsStream, stored string
}

// Targets are the ingest targets by name (Target* constants).
var Targets = map[string]*Target{
	TargetSemaq: {
		Name:    TargetSemaq,
		subject: semaqSubject,
		Stream:  semaqStream,
		Dial:    publicConn,
	},
	TargetSemaqNoSchema: {
		Name:    TargetSemaqNoSchema,
		subject: noSchemaSubject,
		Stream:  noSchemaStream,
		Dial:    publicConn,
	},
	TargetJetStream: {
		Name:    TargetJetStream,
		subject: jetstreamSubject,
		// On the broker: the connection with the semantic layer's rights,
		// which created the stream (the public user may not manage
		// streams). On the raw server: a plain connection.
		Dial: func(r *Rig, name string) (*nats.Conn, error) {
			return r.RawConn(nats.Name(name))
		},
	},
	TargetSemaqInterval: {
		Name:    TargetSemaqInterval,
		subject: semaqIntervalSubject,
		Stream:  semaqIntervalStream,
		Dial:    publicConn,
	},
	TargetJetStreamInterval: {
		Name:     TargetJetStreamInterval,
		subject:  jetstreamIntervalSubject,
		jsStream: jetstreamIntervalStream,
		// Always on the broker, whose JetStream runs without sync_always.
		Dial: func(r *Rig, name string) (*nats.Conn, error) {
			return r.OperatorConn(nats.Name(name))
		},
	},
	TargetJetStreamRelay: {
		Name:     TargetJetStreamRelay,
		subject:  relaySubject,
		jsStream: relayStream,
		stored:   relayStoredSubject,
		// Like TargetJetStreamInterval's: on the broker, below the
		// semantic layer.
		Dial: func(r *Rig, name string) (*nats.Conn, error) {
			return r.OperatorConn(nats.Name(name))
		},
	},
}

// publicConn is an ordinary client's connection: the public user, through
// the ingress.
func publicConn(r *Rig, name string) (*nats.Conn, error) {
	return nats.Connect(r.Broker.ClientURL(), nats.Name(name))
}

// durabilityOf is the durability the SemaQ stream is created with in a sync
// mode: always asks for group-committed fsync explicitly.
func durabilityOf(sync string) string {
	if sync == broker.SyncAlways {
		return broker.DurabilityFsync
	}
	return broker.DurabilityInterval
}

// createStreams makes the streams of the scenario. The SemaQ stream is
// created through the SDK like a user's, with the given durability, and
// bound to sc, registered first, when sc is not nil; then, with sc, the
// unbound SemaQ stream of TargetSemaqNoSchema, likewise; the
// raw stream is a copy of the JetStream configuration the broker made for
// it, minus the reserved namespace and its transform, so both store with
// exactly the same settings (file storage, limits, AllowMsgTTL,
// AllowDirect, dedup window) whatever the broker's defaults become. It is
// created on the raw server when the rig has one.
func createStreams(ctx context.Context, r *Rig, durability string, sc *SchemaConfig) error {
	want := semaq.StreamConfig{Name: semaqStream, Subjects: []string{semaqSubjects}, Durability: durability}
	if sc != nil {
		id, _, err := r.admin.RegisterSchema(ctx, SchemaSubject, sc.Text, client.WithSchemaType(string(sc.Type)))
		if err != nil {
			return fmt.Errorf("bench: registering %s under %s: %w", nameOr(sc.File, "the schema"), SchemaSubject, err)
		}
		r.schemaID, want.Schema = id, SchemaSubject
	}
	info, err := r.admin.AddStream(ctx, want)
	if err != nil {
		return fmt.Errorf("bench: creating stream %s: %w", semaqStream, err)
	}
	if info.Config.Durability != durability {
		return fmt.Errorf("bench: stream %s has durability %q, asked for %q", semaqStream, info.Config.Durability, durability)
	}
	if info.Config.Schema != want.Schema {
		return fmt.Errorf("bench: stream %s is bound to schema subject %q, asked for %q", semaqStream, info.Config.Schema, want.Schema)
	}
	if sc != nil {
		if err := createPlainStream(ctx, r, durability); err != nil {
			return err
		}
	}

	cfg, err := storedConfig(ctx, r, semaqStream)
	if err != nil {
		return err
	}

	rnc, err := r.RawConn(nats.Name("semaq-bench-admin"))
	if err != nil {
		return fmt.Errorf("bench: raw JetStream connection: %w", err)
	}
	defer rnc.Close()
	rjs, err := jetstream.New(rnc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if _, err := rjs.CreateStream(ctx, rawConfig(cfg)); err != nil {
		return fmt.Errorf("bench: creating stream %s: %w", JetStreamStream, err)
	}
	return nil
}

// createPlainStream makes the SemaQ stream of TargetSemaqNoSchema: the
// SemaQ target's settings, no schema, no policy.
func createPlainStream(ctx context.Context, r *Rig, durability string) error {
	info, err := r.admin.AddStream(ctx, semaq.StreamConfig{Name: noSchemaStream, Subjects: []string{noSchemaSubjects}, Durability: durability})
	if err != nil {
		return fmt.Errorf("bench: creating stream %s: %w", noSchemaStream, err)
	}
	if info.Config.Durability != durability || info.Config.Schema != "" {
		return fmt.Errorf("bench: stream %s has durability %q and schema %q, asked for %q and none", noSchemaStream, info.Config.Durability, info.Config.Schema, durability)
	}
	return nil
}

// addPolicy stores rule on the SemaQ target's subjects; the broker
// answers once the ingress applies it.
func addPolicy(ctx context.Context, r *Rig, rule semaq.PolicyRule) error {
	rule.Subjects, rule.Streams = []string{semaqSubjects}, nil
	if _, err := r.admin.AddPolicy(ctx, rule); err != nil {
		return fmt.Errorf("bench: policy %s on %s: %w", rule.Name, semaqSubjects, err)
	}
	return nil
}

// createCeilingStreams makes the streams of the ceiling's targets on the
// broker: a SemaQ stream with durability interval, and a raw copy of it
// as createStreams copies the fsync one. Both store on the broker's
// JetStream, which runs without sync_always when the run's is always.
func createCeilingStreams(ctx context.Context, r *Rig) error {
	info, err := r.admin.AddStream(ctx, semaq.StreamConfig{Name: semaqIntervalStream, Subjects: []string{semaqIntervalSubjects}, Durability: broker.DurabilityInterval})
	if err != nil {
		return fmt.Errorf("bench: creating stream %s: %w", semaqIntervalStream, err)
	}
	if info.Config.Durability != broker.DurabilityInterval {
		return fmt.Errorf("bench: stream %s has durability %q, asked for %q", semaqIntervalStream, info.Config.Durability, broker.DurabilityInterval)
	}
	cfg, err := storedConfig(ctx, r, semaqIntervalStream)
	if err != nil {
		return err
	}
	c := rawConfig(cfg)
	c.Name, c.Subjects = jetstreamIntervalStream, []string{jetstreamIntervalSubjects}
	return createOperatorStream(ctx, r, c)
}

// createOperatorStream creates c on the broker's JetStream below the
// semantic layer, as the bench's operator.
func createOperatorStream(ctx context.Context, r *Rig, c jetstream.StreamConfig) error {
	return withOperatorJS(r, func(js jetstream.JetStream) error {
		if _, err := js.CreateStream(ctx, c); err != nil {
			return fmt.Errorf("bench: creating stream %s: %w", c.Name, err)
		}
		return nil
	})
}

// withOperatorJS runs fn with a JetStream context on a short-lived
// operator connection.
func withOperatorJS(r *Rig, fn func(jetstream.JetStream) error) error {
	nc, err := r.OperatorConn(nats.Name("semaq-bench-admin"))
	if err != nil {
		return fmt.Errorf("bench: internal connection: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return fn(js)
}

// storedConfig reads the JetStream configuration the broker stores SemaQ
// stream name under, over an operator connection.
func storedConfig(ctx context.Context, r *Rig, name string) (jetstream.StreamConfig, error) {
	var cfg jetstream.StreamConfig
	err := withOperatorJS(r, func(js jetstream.JetStream) error {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("bench: reading stream %s: %w", name, err)
		}
		cfg = st.CachedInfo().Config
		return nil
	})
	return cfg, err
}

// rawConfig is the baseline stream: the SemaQ stream's JetStream
// configuration on a public subject with no transform and no SemaQ marker.
func rawConfig(c jetstream.StreamConfig) jetstream.StreamConfig {
	c.Name = JetStreamStream
	c.Description = "semaq bench: raw JetStream baseline"
	c.Subjects = []string{jetstreamSubjects}
	c.SubjectTransform = nil
	c.Metadata = nil
	return c
}

// Setup reads back where each target runs and how its acks are made
// durable, from the running servers rather than from the configuration.
func (r *Rig) Setup(ctx context.Context, names []string) ([]TargetSetup, error) {
	out := make([]TargetSetup, 0, len(names))
	for _, name := range names {
		switch name {
		case TargetSemaq, TargetSemaqNoSchema, TargetSemaqInterval:
			stream := Targets[name].Stream
			info, err := r.admin.StreamInfo(ctx, stream)
			if err != nil {
				return nil, fmt.Errorf("bench: stream %s: %w", stream, err)
			}
			out = append(out, TargetSetup{
				Target: name, Server: ServerBroker, Stream: stream,
				JetStreamSyncAlways: syncAlways(r.Broker.NATSServer()),
				Durability:          info.Config.Durability,
				Schema:              info.Config.Schema,
				IngressTransport:    r.Broker.IngressTransport(),
			})
		case TargetJetStream:
			s := TargetSetup{Target: name, Server: ServerBroker, Stream: JetStreamStream, JetStreamSyncAlways: syncAlways(r.rawServer())}
			if r.raw != nil {
				s.Server = ServerRaw
			}
			s.Durability = DurabilityInterval
			if s.JetStreamSyncAlways {
				s.Durability = DurabilitySyncAlways
			}
			out = append(out, s)
		case TargetJetStreamInterval, TargetJetStreamRelay:
			s := TargetSetup{Target: name, Server: ServerBroker, Stream: jetstreamIntervalStream, JetStreamSyncAlways: syncAlways(r.Broker.NATSServer())}
			if name == TargetJetStreamRelay {
				if r.relay == nil {
					return nil, fmt.Errorf("bench: %s: the relay is not running", name)
				}
				s.Stream, s.IngressTransport = relayStream, r.relay.transport
			}
			s.Durability = DurabilityInterval
			if s.JetStreamSyncAlways {
				s.Durability = DurabilitySyncAlways
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// checkEnforced makes sure the ingress validated what the SemaQ stream
// stored: its last message carries the schema's id in AI-Schema-Id, which
// the ingress sets only on a payload it validated.
func (r *Rig) checkEnforced(ctx context.Context) error {
	return withOperatorJS(r, func(js jetstream.JetStream) error {
		st, err := js.Stream(ctx, semaqStream)
		if err != nil {
			return fmt.Errorf("bench: reading stream %s: %w", semaqStream, err)
		}
		m, err := st.GetMsg(ctx, st.CachedInfo().State.LastSeq)
		if err != nil {
			return fmt.Errorf("bench: reading the last message of %s: %w", semaqStream, err)
		}
		if got, want := m.Header.Get(semaq.HdrSchemaID), strconv.Itoa(r.schemaID); got != want {
			return fmt.Errorf("bench: stream %s stored a message with %s %q, want %s: the schema was not enforced", semaqStream, semaq.HdrSchemaID, got, want)
		}
		return nil
	})
}

func syncAlways(ns *server.Server) bool {
	c := ns.JetStreamConfig()
	return c != nil && c.SyncAlways
}

// newMessage is one message of the scenario: data with the envelope an SDK
// client sends for an inference request, with a sampled traceparent if
// asked. Both targets send the same bytes; the ingress validates the
// headers (and, on a bound stream, the payload) and stamps AI-Received on
// the way into the SemaQ stream.
func newMessage(subject string, data []byte, traceparent bool) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(semaq.HdrModel, "llama3-70b-instruct")
	m.Header.Set(semaq.HdrTenant, "acme-prod")
	m.Header.Set(semaq.HdrPriority, semaq.PriorityHigh.String())
	m.Header.Set(semaq.HdrPromptTokens, "512")
	if traceparent {
		m.Header.Set(semaq.HdrTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	}
	m.Data = data
	return m
}

// publisher is one connection publishing one message over and over. Acks
// and failures are counted for the life of the publisher; phases read the
// difference.
type publisher struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	msg *nats.Msg

	acked  atomic.Int64
	failed atomic.Int64

	mu       sync.Mutex
	firstErr error
}

func newPublisher(r *Rig, t *Target, name string, msg *nats.Msg, window int) (*publisher, error) {
	nc, err := t.Dial(r, name)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: connecting: %w", t.Name, err)
	}
	p := &publisher{nc: nc, msg: msg}
	p.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(window),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { p.acked.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) { p.fail(err) }),
	)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bench: %s: %w", t.Name, err)
	}
	return p, nil
}

func (p *publisher) fail(err error) {
	p.failed.Add(1)
	p.mu.Lock()
	if p.firstErr == nil {
		p.firstErr = err
	}
	p.mu.Unlock()
}

func (p *publisher) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstErr
}

func (p *publisher) close() { p.nc.Close() }

// DrainTimeout bounds the wait for the acks still in flight when a
// throughput slice ends. Reaching it means messages were lost.
const DrainTimeout = 30 * time.Second

// publishAsync publishes with at most the window unacknowledged until end,
// then waits for the acks in flight.
func (p *publisher) publishAsync(ctx context.Context, end time.Time) error {
	for ctx.Err() == nil && time.Now().Before(end) {
		if _, err := p.js.PublishMsgAsync(p.msg); err != nil {
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				continue // the window stayed full for a while; keep waiting
			}
			p.fail(err)
			break
		}
	}
	timer := time.NewTimer(DrainTimeout)
	defer timer.Stop()
	select {
	case <-p.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("bench: %d messages still unacknowledged %s after publishing stopped", p.js.PublishAsyncPending(), DrainTimeout)
	}
}

// publishSync publishes one message and waits for its ack.
func (p *publisher) publishSync(ctx context.Context) error {
	_, err := p.js.PublishMsg(ctx, p.msg)
	if err != nil {
		p.fail(err)
		return err
	}
	p.acked.Add(1)
	return nil
}
