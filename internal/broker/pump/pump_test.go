package pump

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

// jetStream starts a NATS server with JetStream on 127.0.0.1 and a stream
// S on s.>, and returns a connection to it.
func jetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, js := jstest.Start(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func bad(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrBadRequest, "test: "+format, args...)
}

func TestSpecConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		spec Spec
		want jetstream.ConsumerConfig
	}{
		{"ephemeral defaults", Spec{Subject: "s.x", MetaKey: "k", Expr: "true"}, jetstream.ConsumerConfig{
			FilterSubject: "s.x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: DefaultAckWait,
			MaxAckPending: DefaultMaxAckPending, InactiveThreshold: ephemeralInactive,
			DeliverPolicy: jetstream.DeliverAllPolicy, Metadata: map[string]string{"k": "true"},
		}},
		{"durable from sequence", Spec{Durable: "d", Subject: "s.x", AckWait: time.Second, MaxAckPending: 7, StartSeq: 42, Deliver: "new", MetaKey: "k", Expr: "e"},
			jetstream.ConsumerConfig{
				Durable: "d", FilterSubject: "s.x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second,
				MaxAckPending: 7, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 42,
				Metadata: map[string]string{"k": "e"},
			}},
		{"durable new", Spec{Durable: "d", Subject: "s.x", Deliver: "new", MetaKey: "k", Expr: "e"}, jetstream.ConsumerConfig{
			Durable: "d", FilterSubject: "s.x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: DefaultAckWait,
			MaxAckPending: DefaultMaxAckPending, DeliverPolicy: jetstream.DeliverNewPolicy, Metadata: map[string]string{"k": "e"},
		}},
		{"anything else is all", Spec{Durable: "d", Subject: "s.x", Deliver: "last", MetaKey: "k", Expr: "e"}, jetstream.ConsumerConfig{
			Durable: "d", FilterSubject: "s.x", AckPolicy: jetstream.AckExplicitPolicy, AckWait: DefaultAckWait,
			MaxAckPending: DefaultMaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy, Metadata: map[string]string{"k": "e"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.spec.Config()
			if got.Metadata["k"] != tc.want.Metadata["k"] || len(got.Metadata) != 1 {
				t.Errorf("metadata %v, want %v", got.Metadata, tc.want.Metadata)
			}
			got.Metadata, tc.want.Metadata = nil, nil
			if got.Durable != tc.want.Durable || got.FilterSubject != tc.want.FilterSubject || got.AckPolicy != tc.want.AckPolicy ||
				got.AckWait != tc.want.AckWait || got.MaxAckPending != tc.want.MaxAckPending ||
				got.InactiveThreshold != tc.want.InactiveThreshold || got.DeliverPolicy != tc.want.DeliverPolicy ||
				got.OptStartSeq != tc.want.OptStartSeq {
				t.Errorf("config\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestResume(t *testing.T) {
	t.Parallel()
	_, js := jetStream(t)
	ctx := context.Background()
	ours := Spec{Durable: "ours", Subject: "s.a", MetaKey: semaq.MetadataFilter, Expr: "true"}
	if _, err := js.CreateConsumer(ctx, "S", ours.Config()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "plain", FilterSubject: "s.a"}); err != nil {
		t.Fatal(err)
	}
	words := Words{Bad: bad, NotOurs: "not ours: %s", OtherExpr: "%s has %q, not %q", OtherSubject: "%s follows %s, not %s"}
	with := func(f func(*Spec)) Spec { s := ours; f(&s); return s }
	for _, tc := range []struct {
		name     string
		spec     Spec
		found    bool
		wantExpr string
		err      string
	}{
		{"none yet", with(func(s *Spec) { s.Durable, s.Expr = "new", "x > 1" }), false, "x > 1", ""},
		{"same expression", ours, true, "true", ""},
		{"stored expression", with(func(s *Spec) { s.Expr = "" }), true, "true", ""},
		{"other expression", with(func(s *Spec) { s.Expr = "false" }), false, "", `test: ours has "true", not "false"`},
		{"other subject", with(func(s *Spec) { s.Subject = "s.b" }), false, "", "test: ours follows s.a, not s.b"},
		{"not ours", with(func(s *Spec) { s.Durable = "plain" }), false, "", "test: not ours: plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cons, expr, err := Resume(ctx, js, "S", tc.spec, words)
			if tc.err != "" {
				if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (cons != nil) != tc.found || expr != tc.wantExpr {
				t.Errorf("consumer found %v, expression %q; want %v, %q", cons != nil, expr, tc.found, tc.wantExpr)
			}
		})
	}
}

func TestStreamFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		names []string
		want  string
		err   error
	}{
		{nil, "", semaq.ErrNoStream},
		{[]string{"A"}, "A", nil},
		{[]string{"A", "B"}, "", semaq.ErrBadRequest},
	} {
		d := Deps{Streams: func(context.Context, string) ([]string, error) { return tc.names, nil }}
		got, err := d.StreamFor(context.Background(), "x.y", bad)
		if got != tc.want || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("%v: got %q, %v; want %q, %v", tc.names, got, err, tc.want, tc.err)
		}
	}
}

func TestDepsPrepare(t *testing.T) {
	t.Parallel()
	if _, err := (Deps{}).Prepare(5); err == nil {
		t.Error("empty Deps accepted")
	}
	nc, js := jetStream(t)
	env, err := expr.NewEnvConfig(expr.Config{})
	if err != nil {
		t.Fatal(err)
	}
	streams := func(context.Context, string) ([]string, error) { return nil, nil }
	d, err := Deps{JS: js, Egress: nc, Env: env, Streams: streams}.Prepare(5)
	if err != nil || d.Log == nil || d.Max != 5 {
		t.Errorf("Prepare: %+v, %v; want a logger and Max 5", d, err)
	}
	if d, _ := (Deps{JS: js, Egress: nc, Env: env, Streams: streams, Max: 2}).Prepare(5); d.Max != 2 {
		t.Errorf("Max %d, want the 2 it was given", d.Max)
	}
}

func TestChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"inbox", CheckDeliver("_INBOX.abc", bad), ""},
		{"wildcard", CheckDeliver("_INBOX.*", bad), "deliver_subject"},
		{"reserved", CheckDeliver("$JS.API.x", bad), "use an inbox"},
		{"limits", CheckLimits(10, time.Second, 10, bad), ""},
		{"negative", CheckLimits(-1, 0, 10, bad), "may not be negative"},
		{"over", CheckLimits(11, 0, 10, bad), "is over 10"},
	} {
		if tc.want == "" && tc.err != nil || tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, tc.err, tc.want)
		}
	}
}

// item is a leased thing for registry tests.
type item struct{ lease Lease }

func (x *item) Lease() *Lease { return &x.lease }

func TestRegistryReapsExpiredAndStopWaits(t *testing.T) {
	t.Parallel()
	r := NewRegistry[*item](semaq.ErrFilterGone, "thing %s is not running")
	live, dead := &item{}, &item{}
	liveID, _ := r.Add(live)
	deadID, _ := r.Add(dead)
	if !strings.HasPrefix(liveID, r.Node()+".") || liveID == deadID {
		t.Fatalf("ids %q, %q under node %q", liveID, deadID, r.Node())
	}
	dead.lease = Lease{} // never pinged
	ended := make(chan *item, 10)
	var stopped atomic.Bool
	gate := subsystem.NewGate("test")
	r.StartReaper(gate, time.Millisecond, func(x *item) {
		if stopped.Load() {
			t.Error("end called after Stop returned")
		}
		r.Remove(deadID, x)
		ended <- x
	})
	if x := <-ended; x != dead {
		t.Fatalf("reaped %p, want the unpinged %p", x, dead)
	}
	if !r.Close() {
		t.Error("the first Close did not report closing")
	}
	stopped.Store(true)
	if r.Close() {
		t.Error("a second Close reported closing")
	}
	if _, ok := r.Add(&item{}); ok {
		t.Error("Add after Close held the item")
	}
	if all := r.All(); len(all) != 1 || all[0] != live {
		t.Errorf("left %v, want only the pinged one", all)
	}
	if r.Remove(deadID, live) || r.Remove("nope", live) {
		t.Error("Remove forgot what it does not hold under that id")
	}
	if n := gate.Running(); n != 0 {
		t.Errorf("%d reap loops still run after Close", n)
	}
	if !r.Remove(liveID, live) || r.Len() != 0 {
		t.Error("Remove kept the item")
	}
}

func TestRegistryHandler(t *testing.T) {
	t.Parallel()
	nc, _ := jetStream(t)
	r := NewRegistry[*item](semaq.ErrFilterGone, "thing %s is not running")
	x := &item{}
	id, _ := r.Add(x)
	x.lease = Lease{}
	h := r.Ping(slog.New(slog.DiscardHandler), func(got *item) any {
		if got != x {
			t.Errorf("handler got %p, want %p", got, x)
		}
		return map[string]string{"ok": "yes"}
	})
	if _, err := nc.Subscribe("T.PING."+r.Node()+".*", h); err != nil {
		t.Fatal(err)
	}
	_, n, _ := strings.Cut(id, ".")
	m, err := nc.Request("T.PING."+r.Node()+"."+n, nil, 5*time.Second)
	if err != nil || string(m.Data) != `{"ok":"yes"}` {
		t.Fatalf("ping: %v %s", err, m.Data)
	}
	if x.lease.Before(time.Now().Add(-time.Minute)) {
		t.Error("the ping did not renew the lease")
	}
	m, err = nc.Request("T.PING."+r.Node()+".999", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var reply semaq.ErrorReply
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Error == nil || !errors.Is(reply.Error, semaq.ErrFilterGone) ||
		!strings.Contains(reply.Error.Description, "T.PING."+r.Node()+".999 is not running") {
		t.Errorf("unknown id: %s", m.Data)
	}
}

func TestForwardAndDrain(t *testing.T) {
	t.Parallel()
	nc, js := jetStream(t)
	ctx := context.Background()
	if _, err := js.Publish(ctx, "s.a", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	out, err := nc.SubscribeSync("_INBOX.d.>")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "S", Spec{Subject: "s.a", MetaKey: "k", Expr: "e"}.Config())
	if err != nil {
		t.Fatal(err)
	}
	forwarded := make(chan error, 1)
	cc, err := Consume(cons, func(jm jetstream.Msg) {
		h, err := Forward(nc, "_INBOX.d", jm)
		if err == nil && h.Get(semaq.HdrFilterAck) != jm.Reply() {
			err = errors.New("ack subject not in the returned headers")
		}
		forwarded <- err
	}, slog.New(slog.DiscardHandler), "test consume")
	if err != nil {
		t.Fatal(err)
	}
	if err := <-forwarded; err != nil {
		t.Fatal(err)
	}
	m, err := out.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "_INBOX.d.s.a" || string(m.Data) != "hello" || !strings.HasPrefix(m.Header.Get(semaq.HdrFilterAck), "$JS.ACK.S.") {
		t.Errorf("forwarded %s %q %v", m.Subject, m.Data, m.Header)
	}
	Drain(ctx, cc)
	select {
	case <-cc.Closed():
	default:
		t.Error("Drain returned before the consume context closed")
	}
	Drain(ctx, nil) // nothing to drain
}
