package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
)

// The comparison is only fair if both streams store alike, and in always
// mode only if the baseline's server really fsyncs every message while the
// broker leaves it to the ingress's group commit.
func TestStreamsStoreAlike(t *testing.T) {
	for _, sync := range []string{broker.SyncInterval, broker.SyncAlways} {
		t.Run(sync, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := startTestRigSync(t, sync)
			cfgOf := func(nc *nats.Conn, err error, name string) jetstream.StreamConfig {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				st, err := jsOn(t, nc).Stream(ctx, name)
				if err != nil {
					t.Fatalf("stream %s: %v", name, err)
				}
				c := st.CachedInfo().Config
				c.Name, c.Description, c.Subjects, c.SubjectTransform, c.Metadata = "", "", nil, nil, nil
				return c
			}
			nc, err := r.OperatorConn()
			s := cfgOf(nc, err, semaqStream)
			rnc, err := r.RawConn()
			raw := cfgOf(rnc, err, JetStreamStream)
			sj, _ := json.Marshal(s)
			rj, _ := json.Marshal(raw)
			if !bytes.Equal(sj, rj) {
				t.Errorf("stream settings differ:\nsemaq     %s\njetstream %s", sj, rj)
			}
			if s.Storage != jetstream.FileStorage || !s.AllowMsgTTL {
				t.Errorf("semaq stream: storage %s, AllowMsgTTL %v; the scenario expects file storage with TTLs", s.Storage, s.AllowMsgTTL)
			}

			always := sync == broker.SyncAlways
			if got := r.Broker.NATSServer().JetStreamConfig().SyncAlways; got {
				t.Error("the broker runs JetStream with sync_always; durability is the ingress's group commit")
			}
			if (r.raw != nil) != always {
				t.Fatalf("raw server running = %v in %s mode", r.raw != nil, sync)
			}
			if always {
				if !r.raw.JetStreamConfig().SyncAlways {
					t.Error("the raw baseline's server runs without sync_always")
				}
				if r.raw.ClientURL() == r.Broker.ClientURL() {
					t.Error("the raw baseline shares the broker's server")
				}
			}
			info, err := r.admin.StreamInfo(ctx, semaqStream)
			if err != nil {
				t.Fatal(err)
			}
			if want := durabilityOf(sync); info.Config.Durability != want {
				t.Errorf("semaq stream durability %q, want %q", info.Config.Durability, want)
			}
		})
	}
}

// Both targets store the same message; only the SemaQ one passes the
// ingress, which stamps it.
func TestTargetsStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	for _, name := range DefaultTargets {
		p, err := r.publisher(Targets[name], generatedBody(100), true, 8)
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		if err := p.publishSync(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	js := operatorJS(t, r)
	for _, tc := range []struct {
		stream, subject string
		stamped         bool
	}{{semaqStream, semaqSubject, true}, {JetStreamStream, jetstreamSubject, false}} {
		st, err := js.Stream(ctx, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(ctx, 1)
		if err != nil {
			t.Fatalf("%s: %v", tc.stream, err)
		}
		if m.Subject != tc.subject || len(m.Data) != 100 || m.Header.Get("AI-Model") == "" {
			t.Errorf("%s stored %s with %d bytes and headers %v", tc.stream, m.Subject, len(m.Data), m.Header)
		}
		if m.Header.Get("traceparent") == "" {
			t.Errorf("%s: traceparent lost: %v", tc.stream, m.Header)
		}
		if got := m.Header.Get("AI-Received") != ""; got != tc.stamped {
			t.Errorf("%s: AI-Received set = %v, want %v", tc.stream, got, tc.stamped)
		}
	}
}

func startTestRig(tb testing.TB) *Rig {
	tb.Helper()
	return startTestRigSync(tb, broker.SyncInterval)
}

func startTestRigSync(tb testing.TB, sync string) *Rig {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRig(ctx, tb.TempDir(), sync, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Close)
	return r
}

// operatorJS is a JetStream context as the bench's operator, below the
// semantic layer; its connection closes when the test ends.
func operatorJS(tb testing.TB, r *Rig) jetstream.JetStream {
	tb.Helper()
	nc, err := r.OperatorConn()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return jsOn(tb, nc)
}

func jsOn(tb testing.TB, nc *nats.Conn) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}
