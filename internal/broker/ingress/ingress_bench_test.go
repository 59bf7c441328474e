package ingress

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkIngressOwn is the ingress's own work per message and nothing
// else (allocs/op is goal P1's "allocations per ingress message"): a
// delivered HMSG with the benchmark envelope (internal/bench: model,
// tenant, priority, prompt tokens and, in the first case, a sampled
// traceparent; 1 KiB of data) as the reader hands it over, through
// header decoding, the envelope, the pipeline (schema, route, admission:
// none configured), metrics, and the republish into the connection's
// buffer, which a stand-in server reads and discards. The NATS server's
// own work on either hop is not in it: BenchmarkIngressPublishAsync in
// internal/bench has the whole process.
func BenchmarkIngressOwn(b *testing.B) {
	for _, tp := range []bool{true, false} {
		b.Run("traceparent="+strconv.FormatBool(tp), func(b *testing.B) {
			in := ownIngress(b)
			st := &stream{name: "BENCH", subjects: []string{"bench.semaq.>"}}
			po := in.pattern("bench.semaq.>")
			m := nats.NewMsg("bench.semaq.ingest")
			m.Header.Set(semaq.HdrModel, "llama3-70b-instruct")
			m.Header.Set(semaq.HdrTenant, "acme-prod")
			m.Header.Set(semaq.HdrPriority, semaq.PriorityHigh.String())
			m.Header.Set(semaq.HdrPromptTokens, "512")
			if tp {
				m.Header.Set(semaq.HdrTraceParent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			}
			hdr, err := wire.AppendHeader(nil, m.Header)
			if err != nil {
				b.Fatal(err)
			}
			wm := wire.Msg{Subject: []byte(m.Subject), Reply: []byte("_INBOX.nPKnYpVw0Mr5PRkeHO5x2n.vQhbgPHI"), Header: hdr, Data: make([]byte, 1024)}
			b.ReportAllocs()
			b.SetBytes(1024)
			i := 0
			for b.Loop() {
				in.receive(st, po, &wm)
				if i++; i%64 == 0 { // the reader flushes when its input runs dry
					if err := in.wire.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if got := in.accepted.Load(); got == 0 || in.rejected.Load() != 0 {
				b.Fatalf("%d accepted, %d rejected", got, in.rejected.Load())
			}
		})
	}
}

// ownIngress is an ingress with metrics and one shard whose connection
// talks to a stand-in server on a pipe: INFO, PONG for the login, then it
// reads and discards.
func ownIngress(b *testing.B) *Ingress {
	b.Helper()
	dial := func() (net.Conn, error) {
		cli, srv := net.Pipe()
		go standInServer(srv)
		return cli, nil
	}
	c, err := wire.Connect(wire.Config{Dial: dial, Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	in := &Ingress{
		log:     slog.New(slog.DiscardHandler),
		opts:    semaq.NormalizeOptions{Stamp: true},
		streams: make(map[string]*stream),
		served:  NewServed(),
		metrics: metrics.New(metrics.Options{Version: "bench"}),
		wire:    c,
	}
	in.shards = []*shard{{in: in, conn: c}}
	return in
}

func standInServer(conn net.Conn) {
	defer conn.Close()
	if _, err := io.WriteString(conn, `INFO {"max_payload":1048576,"headers":true}`+"\r\n"); err != nil {
		return
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if line == "PING\r\n" {
			if _, err := io.WriteString(conn, "PONG\r\n"); err != nil {
				return
			}
			break
		}
	}
	_, _ = io.Copy(io.Discard, r)
}
