// Package bench measures SemaQ against raw embedded JetStream in the same
// run and reports the ratio: absolute figures on a shared machine are noise,
// the ratio is the signal.
//
// A run starts one embedded broker (NATS on 127.0.0.1 with a free port, no
// HTTP) and drives it from nats.go clients over loopback TCP. The ingest
// scenario (RunIngest) publishes to a SemaQ stream through the semantic
// ingress and to a plain JetStream stream with identical storage settings.
// With a schema (IngestConfig.Schema) the SemaQ stream is bound to it in
// the broker's registry, so the ingress validates every message, a second
// SemaQ stream without it can be measured beside it (TargetSemaqNoSchema),
// and all targets publish the same sample payload, valid under the schema.
// With interval sync both streams live on the broker's server. With sync
// always the SemaQ stream is an fsync stream (acks group-committed by the
// ingress) and the raw stream lives on a second embedded nats-server that
// runs JetStream with sync_always, one fsync per message: the durable
// baseline. Phases: asynchronous throughput with a bounded in-flight window,
// sequential publish latency, and publish latency at paced offered rates
// (with IngestConfig.E2E also to each message's receipt by a consumer of the
// stream), each in HDR histograms. With sync interval, TargetJetStreamRelay
// measures the floor of any client-hop ingress: raw JetStream behind a relay
// that republishes each message and does nothing else (relay.go). Reports
// print as a table or JSON.
//
// The other benchmarks live in packages beside it, each importing bench or
// not, never imported by it: the workload scenarios of `semaq bench run`
// (bench/scenario, built on the rig (Rig) and targets (Targets) exported
// here), the dispatch benchmark (bench/dispatch, whose figures are part of
// Report) and the token-stream benchmark (bench/tokens, a report of its
// own). All of them record latencies in the histograms of bench/measure.
package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/operator"
)

// Servers a target can run on, as reports name them.
const (
	// ServerBroker is the SemaQ broker's embedded nats-server.
	ServerBroker = "broker"
	// ServerRaw is a second embedded nats-server in the same process with
	// nothing but JetStream, for the sync_always baseline.
	ServerRaw = "raw"
)

// Rig is the servers of one run with the scenario's streams in them.
type Rig struct {
	Broker *broker.Server
	op     *operator.Operator // the bench's operator login on Broker
	admin  *client.Client     // reads the SemaQ stream's info (group-commit stats)
	// raw runs the raw JetStream stream when it must not share the broker's
	// JetStream settings (sync always); nil when it lives on the broker.
	raw *server.Server
	// relay runs TargetJetStreamRelay's hop once startRelay made it; nil
	// before.
	relay *relay
	// schemaID is the registry id of the schema the SemaQ stream is bound
	// to; 0 without one.
	schemaID int
}

// StartRig starts a broker with the given sync mode and, in always mode, the
// sync_always server of the baseline, keeping their files in
// subdirectories of dir, and creates the streams of both targets, the
// SemaQ one bound to sc when it is not nil.
func StartRig(ctx context.Context, dir, sync string, sc *SchemaConfig, opts ...broker.Option) (_ *Rig, err error) {
	cfg := broker.DefaultConfig()
	cfg.DataDir = filepath.Join(dir, TargetSemaq)
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	cfg.Sync = sync
	cfg.LogLevel = "error"
	op, err := operator.New()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	srv, err := broker.New(cfg, nil, append([]broker.Option{op.Option()}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r := &Rig{Broker: srv, op: op}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if sync == broker.SyncAlways {
		// Same filesystem as the broker's store, so both pay the same disk.
		if r.raw, err = startRawServer(filepath.Join(dir, TargetJetStream), cfg.MaxPayload); err != nil {
			return nil, err
		}
	}
	if r.admin, err = client.Connect(ctx, srv.ClientURL(), client.WithName("semaq-bench-admin")); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := createStreams(ctx, r, durabilityOf(sync), sc); err != nil {
		return nil, err
	}
	return r, nil
}

// startRawServer starts a plain embedded nats-server with JetStream in
// sync_always mode: every message is fsynced before its ack. No auth, no
// signal handlers, loopback on a free port.
func startRawServer(storeDir string, maxPayload int) (*server.Server, error) {
	ns, err := server.NewServer(&server.Options{
		ServerName: "semaq-bench-raw",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   storeDir,
		SyncAlways: true,
		NoSigs:     true,
		MaxPayload: int32(maxPayload),
	})
	if err != nil {
		return nil, fmt.Errorf("bench: raw JetStream server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("bench: raw JetStream server did not become ready")
	}
	if c := ns.JetStreamConfig(); c == nil || !c.SyncAlways {
		ns.Shutdown()
		return nil, errors.New("bench: raw JetStream server runs without sync_always")
	}
	return ns, nil
}

// RawConn connects to the server holding the raw stream with the rights to
// manage and publish to it: the broker as the bench's operator, or the raw
// server, which has no auth.
func (r *Rig) RawConn(opts ...nats.Option) (*nats.Conn, error) {
	if r.raw != nil {
		return nats.Connect(r.raw.ClientURL(), opts...)
	}
	return r.OperatorConn(opts...)
}

// OperatorConn connects to the broker as the bench's operator: every
// right, JetStream below the semantic layer included (broker.WithOperator).
func (r *Rig) OperatorConn(opts ...nats.Option) (*nats.Conn, error) {
	return r.op.Connect(r.Broker.ClientURL(), opts...)
}

// rawServer is the server the raw stream runs on.
func (r *Rig) rawServer() *server.Server {
	if r.raw != nil {
		return r.raw
	}
	return r.Broker.NATSServer()
}

// publisher opens a publisher connection to target t, publishing messages
// with data as payload, with a traceparent or not.
func (r *Rig) publisher(t *Target, data []byte, traceparent bool, window int) (*publisher, error) {
	return newPublisher(r, t, "semaq-bench-"+t.Name, newMessage(t.subject, data, traceparent), window)
}

// Close shuts the rig's servers down, waiting up to 30 s for the broker.
func (r *Rig) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.admin != nil {
		r.admin.Close()
	}
	if r.relay != nil {
		r.relay.close()
	}
	_ = r.Broker.Shutdown(ctx)
	if r.raw != nil {
		r.raw.Shutdown()
		r.raw.WaitForShutdown()
	}
}
