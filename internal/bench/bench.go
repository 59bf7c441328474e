// Package bench measures SemaQ against raw embedded JetStream in the same
// run, on the same server, and reports the ratio: absolute figures on a
// shared machine are noise, the ratio is the signal.
//
// A run starts one embedded broker (temporary data directory, NATS on
// 127.0.0.1 with a free port, no HTTP) and drives it from nats.go clients
// over loopback TCP. The ingest scenario (RunIngest) publishes to a SemaQ
// stream through the semantic ingress and to a plain JetStream stream with
// identical storage settings, measuring asynchronous throughput with a
// bounded in-flight window and synchronous publish latency in HDR
// histograms. Reports print as a table or JSON.
package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/semaq/semaq/internal/broker"
)

// rig is the broker of one run with the scenario's streams in it.
type rig struct {
	srv *broker.Server
}

// startRig starts a broker keeping its files in dir, with the given sync
// mode, and creates the streams of both targets.
func startRig(ctx context.Context, dir, sync string) (_ *rig, err error) {
	cfg := broker.DefaultConfig()
	cfg.DataDir = dir
	cfg.Listen = "127.0.0.1:0"
	cfg.HTTP = ""
	cfg.Sync = sync
	cfg.LogLevel = "error"
	srv, err := broker.New(cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	r := &rig{srv: srv}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if err := createStreams(ctx, srv); err != nil {
		return nil, err
	}
	return r, nil
}

// publisher opens a publisher connection to target t, publishing messages
// of size bytes, with a traceparent or not.
func (r *rig) publisher(t *target, size int, traceparent bool, window int) (*publisher, error) {
	return newPublisher(r.srv, t, "semaq-bench-"+t.name, newMessage(t.subject, size, traceparent), window)
}

func (r *rig) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}
