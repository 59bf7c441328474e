package hostile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Batches (docs/batches.md) from clients that send the worst they can: a
// batch frame carries many messages the broker appends with its own
// rights, and a stock client's atomic batch makes the broker hold
// messages until a commit that may never come.

func bmsg(subject, data string, hdr ...string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(data)
	for i := 0; i+1 < len(hdr); i += 2 {
		m.Header.Add(hdr[i], hdr[i+1])
	}
	return m
}

// rawBatch sends frame as a batch request and decodes the answer.
func rawBatch(t *testing.T, nc *nats.Conn, frame []byte) *semaq.BatchAck {
	t.Helper()
	resp, err := nc.Request(semaq.APIPublishBatch, frame, 10*time.Second)
	if err != nil {
		t.Fatalf("batch request: %v", err)
	}
	var a semaq.BatchAck
	if err := json.Unmarshal(resp.Data, &a); err != nil {
		t.Fatalf("batch answer %q: %v", resp.Data, err)
	}
	return &a
}

// stored is how many messages stream holds.
func stored(t *testing.T, c *client.Client, stream string) uint64 {
	t.Helper()
	info, err := c.StreamInfo(ctxT(t), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return info.State.Messages
}

// metricOf is the value of the gauge or counter name of s whose labels
// include labels (name, value pairs), 0 when it has none yet.
func metricOf(t *testing.T, s *broker.Server, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// waitMetric polls metric name of s until it is want.
func waitMetric(t *testing.T, s *broker.Server, want float64, timeout time.Duration, name string, labels ...string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got := metricOf(t, s, name, labels...)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v is %v after %s, want %v", name, labels, got, timeout, want)
		}
		<-tick.C
	}
}

// A fast batch's messages each take the whole pipeline: the bad ones are
// refused one by one, with their own errors, and nothing of them is
// stored; the good ones around them are.
func TestBatchFastRefusesEachBadMessage(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := ctxT(t)
	if _, _, err := c.RegisterSchema(ctx, "hb-value", `{"type":"object","required":["n"]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "HB", Subjects: []string{"hb.>"}, Schema: "hb-value"}); err != nil {
		t.Fatal(err)
	}
	victim(t, c)
	type want struct {
		stored bool
		err    *semaq.APIError // the sentinel, when one is sure
	}
	cases := []struct {
		m    *nats.Msg
		want want
	}{
		{bmsg("hb.ok", `{"n":1}`), want{stored: true}},
		{bmsg("hb.schema", `{"x":1}`), want{err: semaq.ErrSchema}},
		{bmsg("nowhere.x", `{"n":1}`), want{err: semaq.ErrNoStream}},
		{bmsg("hb.env", `{"n":1}`, semaq.HdrPriority, "nope"), want{err: semaq.ErrEnvelope}},
		{bmsg("hb.status", `{"n":1}`, semaq.HdrStatus, "503"), want{err: semaq.ErrEnvelope}},
		// A frame's message may not start a JetStream batch of its own.
		{bmsg("hb.jsbatch", `{"n":1}`, semaq.HdrBatchID, "b", semaq.HdrBatchSeq, "1"), want{err: semaq.ErrEnvelope}},
		{bmsg("$SQ.x", `{"n":1}`), want{err: semaq.ErrBadRequest}},
		{bmsg("$JS.API.STREAM.DELETE.VICTIM", `{}`), want{err: semaq.ErrBadRequest}},
		{bmsg("_SQ_ACK.x", `{"n":1}`), want{err: semaq.ErrBadRequest}},
		{bmsg("$SQ.w.hb.forged", `{"n":1}`), want{}},
		{bmsg("$SYS.REQ.SERVER.PING", `{}`), want{}},
		{bmsg("hb.*", `{"n":1}`), want{}},
		{bmsg("hb.>", `{"n":1}`), want{}},
		{bmsg("hb..x", `{"n":1}`), want{}},
		{bmsg("", `{"n":1}`), want{}},
		{bmsg("hb.ok", `{"n":2}`), want{stored: true}},
	}
	msgs := make([]*nats.Msg, len(cases))
	for i, tc := range cases {
		msgs[i] = tc.m
	}
	ack, err := c.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stored != 2 || ack.Refused != len(cases)-2 || len(ack.Results) != len(cases) {
		t.Fatalf("ack: %d stored, %d refused, %d results; want 2, %d, %d", ack.Stored, ack.Refused, len(ack.Results), len(cases)-2, len(cases))
	}
	for i, tc := range cases {
		r := ack.Results[i]
		switch {
		case tc.want.stored && (r.Error != nil || r.Stream != "HB"):
			t.Errorf("message %d on %q: %+v %v, want it stored in HB", i, tc.m.Subject, r.PubAck, r.Error)
		case !tc.want.stored && r.Error == nil:
			t.Errorf("message %d on %q: stored (%+v), want it refused", i, tc.m.Subject, r.PubAck)
		case tc.want.err != nil && !errors.Is(r.Error, tc.want.err):
			t.Errorf("message %d on %q: %v, want %s", i, tc.m.Subject, r.Error, tc.want.err.Description)
		case r.Error != nil && r.Error.Description == "":
			t.Errorf("message %d on %q: refused without a reason", i, tc.m.Subject)
		}
	}
	var me *semaq.BatchMsgError
	if err := ack.Err(); !errors.As(err, &me) || me.Index != 1 || me.Refused != len(cases)-2 {
		t.Fatalf("Err() = %v, want message 1 named", err)
	}
	if n := stored(t, c, "HB"); n != 2 {
		t.Fatalf("HB holds %d messages, want the 2 accepted", n)
	}
	victimHeld(t, c)
}

// An atomic batch with one bad message stores nothing, whichever step
// refuses it, and its answer names the message; so does one whose
// messages land in two streams.
func TestBatchAtomicRefusalStoresNothing(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := ctxT(t)
	if _, _, err := c.RegisterSchema(ctx, "ha-value", `{"type":"object","required":["n"]}`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "HA", Subjects: []string{"ha.>"}, Schema: "ha-value"}); err != nil {
		t.Fatal(err)
	}
	brokertest.AddStream(t, c, "HA2", "ha2.>")
	good := func(n int) []*nats.Msg {
		var ms []*nats.Msg
		for i := range n {
			ms = append(ms, bmsg("ha.x", fmt.Sprintf(`{"n":%d}`, i)))
		}
		return ms
	}
	if _, err := c.PublishBatch(ctx, good(5), client.Atomic()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		bad  *nats.Msg
		at   int
		say  string
	}{
		{"schema", bmsg("ha.x", `{"x":1}`), 2, "message 2 on ha.x refused"},
		{"no stream", bmsg("nowhere.x", `{"n":1}`), 0, "message 0 on nowhere.x refused"},
		{"envelope", bmsg("ha.x", `{"n":1}`, semaq.HdrPriority, "nope"), 4, "message 4 on ha.x refused"},
		{"reserved subject", bmsg("$JS.API.STREAM.PURGE.HA", `{}`), 3, "message 3 on $JS.API.STREAM.PURGE.HA refused"},
		{"ack subject", bmsg("_SQ_ACK.x", `{"n":1}`), 1, "message 1 on _SQ_ACK.x refused"},
		{"storage subject", bmsg("$SQ.w.ha.x", `{"n":1}`), 2, "message 2 on $SQ.w.ha.x refused"},
		{"two streams", bmsg("ha2.x", `{"n":1}`), 3, "stream HA2, message 0 in HA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := good(5)
			msgs = append(msgs[:tc.at:tc.at], append([]*nats.Msg{tc.bad}, msgs[tc.at:]...)...)
			ack, err := c.PublishBatch(ctx, msgs, client.Atomic())
			if !errors.Is(err, semaq.ErrBatchRefused) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("error %v, want ErrBatchRefused saying %q", err, tc.say)
			}
			if ack == nil || ack.Index == nil || *ack.Index != tc.at || ack.Stored != 0 || len(ack.Results) != len(msgs) {
				t.Fatalf("ack %+v, want none stored and index %d", ack, tc.at)
			}
			for i, r := range ack.Results {
				if r.Error == nil || r.Sequence != 0 {
					t.Fatalf("result %d: %+v, want a refusal", i, r)
				}
			}
		})
	}
	if n := stored(t, c, "HA"); n != 5 {
		t.Fatalf("HA holds %d messages, want the 5 of the first batch", n)
	}
	if n := stored(t, c, "HA2"); n != 0 {
		t.Fatalf("HA2 holds %d messages, want none", n)
	}
}

// Batches over a bound are refused as a whole with ErrBatchLimit and
// store nothing: more than MaxBatchMsgs messages (from the SDK, and in a
// frame made by hand), a frame over the server's max payload; a message
// that outgrows the max payload once its envelope is stamped is refused
// alone in a fast batch, and refuses an atomic one.
func TestBatchOverBoundsStoresNothing(t *testing.T) {
	t.Parallel()
	const maxPayload = 64 << 10
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.MaxPayload = maxPayload })
	c := brokertest.Connect(t, s)
	ctx := ctxT(t)
	brokertest.AddStream(t, c, "HL", "hl.>")
	many := make([]*nats.Msg, semaq.MaxBatchMsgs+1)
	bms := make([]semaq.BatchMsg, len(many))
	for i := range many {
		many[i] = bmsg("hl.x", "m")
		bms[i] = semaq.BatchMsg{Subject: "hl.x", Data: []byte("m")}
	}
	if _, err := c.PublishBatch(ctx, many); !errors.Is(err, semaq.ErrBatchLimit) {
		t.Fatalf("SDK batch of %d: %v, want ErrBatchLimit", len(many), err)
	}
	a := connectAttacker(t, s)
	for _, atomic := range []bool{false, true} {
		ack := rawBatch(t, a.nc, semaq.AppendBatchFrame(nil, atomic, bms))
		if !errors.Is(ack.Error, semaq.ErrBatchLimit) || !strings.Contains(ack.Error.Description, "1000") || ack.Stored != 0 {
			t.Fatalf("frame of %d messages (atomic %v): %+v, want ErrBatchLimit naming the bound", len(bms), atomic, ack.Error)
		}
	}
	big := []*nats.Msg{bmsg("hl.x", strings.Repeat("b", maxPayload/2)), bmsg("hl.x", strings.Repeat("b", maxPayload/2))}
	if _, err := c.PublishBatch(ctx, big); !errors.Is(err, semaq.ErrBatchLimit) || !strings.Contains(err.Error(), "max payload") {
		t.Fatalf("batch over the max payload: %v, want ErrBatchLimit naming it", err)
	}
	// A frame carries a header in fewer bytes than a NATS header block:
	// this message fits in its frame, not in the broker's append.
	grown := bmsg("hl.grown", "")
	for i := range 40 {
		grown.Header.Set(fmt.Sprintf("X-H%02d", i), "v")
	}
	grown.Data = bytes.Repeat([]byte("g"), maxPayload-400)
	ack, err := c.PublishBatch(ctx, []*nats.Msg{bmsg("hl.x", "before"), grown, bmsg("hl.x", "after")})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stored != 2 || !errors.Is(ack.Results[1].Error, semaq.ErrTooLarge) {
		t.Fatalf("fast batch with a grown message: %+v, want it alone refused as too large", ack)
	}
	ack, err = c.PublishBatch(ctx, []*nats.Msg{bmsg("hl.x", "before"), grown, bmsg("hl.x", "after")}, client.Atomic())
	if !errors.Is(err, semaq.ErrBatchRefused) || ack == nil || ack.Index == nil || *ack.Index != 1 {
		t.Fatalf("atomic batch with a grown message: %v %+v, want it refused naming message 1", err, ack)
	}
	if n := stored(t, c, "HL"); n != 2 {
		t.Fatalf("HL holds %d messages, want the fast batch's 2", n)
	}
}

// A malformed frame is refused as a whole with ErrBadBatch. A frame
// without a reply is not looked at; one whose reply names a system
// subject is answered in the client's own account (the server maps the
// reply of a publish through its account's import), never with the
// broker's rights.
func TestBatchMalformedFrames(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "HM", "hm.>")
	victim(t, c)
	a := connectAttacker(t, s)
	one := semaq.AppendBatchFrame(nil, false, []semaq.BatchMsg{{Subject: "hm.x", Data: []byte("d")}})
	for name, frame := range map[string][]byte{
		"empty":            nil,
		"magic only":       []byte("SQB1"),
		"no messages":      []byte("SQB1\x00"),
		"unknown flags":    append([]byte("SQB1\x02"), one[5:]...),
		"job frame":        append([]byte("SQJ1"), one[5:]...),
		"garbage":          []byte("SQB1\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01garbage"),
		"long subject":     []byte("SQB1\x00\xff\xff\x03hm.x"),
		"headers overflow": []byte("SQB1\x01\x04hm.x\xff\xff\xff\xff\x0f"),
		"truncated":        one[:len(one)-1],
		"trailing bytes":   append(bytes.Clone(one), 0x04, 'h', 'm'),
		"json":             []byte(`{"messages":[{"subject":"hm.x"}]}`),
	} {
		ack := rawBatch(t, a.nc, frame)
		if !errors.Is(ack.Error, semaq.ErrBadBatch) || ack.Error.Description == "" || ack.Results != nil {
			t.Errorf("%s: %+v, want ErrBadBatch saying why", name, ack)
		}
	}
	spied := spy(t, s, "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$KV.SQ_ROUTES.>", "$SQ.w.victim.forged", "_SQ_ACK.x.>", "$SYS.REQ.>")
	for _, reply := range deputyReplies {
		if err := a.nc.PublishRequest(semaq.APIPublishBatch, reply, one); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.nc.Publish(semaq.APIPublishBatch, one); err != nil {
		t.Fatal(err)
	}
	// One connection's frames are handled in order: once this one is
	// answered, the ones before it were handled.
	if ack := rawBatch(t, a.nc, one); ack.Stored != 1 {
		t.Fatalf("a good batch after the bad ones: %+v", ack)
	}
	noneOn(t, spied)
	victimHeld(t, c)
	if n, want := stored(t, c, "HM"), uint64(len(deputyReplies)+1); n != want {
		t.Fatalf("HM holds %d messages, want %d: the frames with a reply, not the one without", n, want)
	}
}

// stockMsg is message seq of a stock client's atomic batch id.
func stockMsg(subject, id string, seq int, commit bool, data []byte) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(semaq.HdrBatchID, id)
	m.Header.Set(semaq.HdrBatchSeq, fmt.Sprint(seq))
	if commit {
		m.Header.Set(semaq.HdrBatchCommit, "1")
	}
	return m
}

// stockReply sends m as a request and returns the answer's error, nil for
// a flow-control ack or a batch ack.
func stockReply(t *testing.T, nc *nats.Conn, m *nats.Msg) *semaq.APIError {
	t.Helper()
	resp, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", m.Header.Get(semaq.HdrBatchID), m.Header.Get(semaq.HdrBatchSeq), err)
	}
	if len(resp.Data) == 0 {
		return nil
	}
	var r semaq.ErrorReply
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		t.Fatalf("answer %q: %v", resp.Data, err)
	}
	return r.Error
}

// A stock client's batches are bounded per connection, and hold no
// message past the timeout: an abandoned batch frees its slot and memory
// (semaq_batches_open goes back down), its late commit is answered as
// abandoned, and a batch under the same id goes through afterwards.
func TestStockBatchAbandonedAndBounded(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "HS", "hs.>")
	a := connectAttacker(t, s)
	for i := range semaq.MaxOpenBatches {
		if e := stockReply(t, a.nc, stockMsg("hs.x", fmt.Sprint("open-", i), 1, false, []byte("x"))); e != nil {
			t.Fatalf("batch %d: %v", i, e)
		}
	}
	if got := metricOf(t, s, "semaq_batches_open"); got != semaq.MaxOpenBatches {
		t.Fatalf("semaq_batches_open = %v with %d stock batches open", got, semaq.MaxOpenBatches)
	}
	e := stockReply(t, a.nc, stockMsg("hs.x", "one-more", 1, false, []byte("x")))
	if !errors.Is(e, semaq.ErrBatchLimit) || !strings.Contains(e.Description, fmt.Sprint(semaq.MaxOpenBatches)) {
		t.Fatalf("batch %d on one connection: %v, want ErrBatchLimit naming the bound", semaq.MaxOpenBatches+1, e)
	}
	// Another connection is not held back by this one's batches.
	other := connectAttacker(t, s)
	if e := stockReply(t, other.nc, stockMsg("hs.x", "other", 1, false, []byte("x"))); e != nil {
		t.Fatalf("another connection's batch: %v", e)
	}
	// A commit frees a slot.
	if e := stockReply(t, a.nc, stockMsg("hs.x", "open-0", 2, true, []byte("y"))); e != nil {
		t.Fatalf("commit: %v", e)
	}
	if e := stockReply(t, a.nc, stockMsg("hs.x", "one-more", 1, false, []byte("x"))); e != nil {
		t.Fatalf("a batch in the freed slot: %v", e)
	}
	// Nobody commits the rest: after the timeout they are dropped.
	waitMetric(t, s, 0, semaq.BatchTimeoutSeconds*time.Second+10*time.Second, "semaq_batches_open")
	if got := metricOf(t, s, "semaq_batches_total", "door", "stock", "outcome", "abandoned"); got != semaq.MaxOpenBatches+1 {
		t.Fatalf("%v batches counted abandoned, want %d", got, semaq.MaxOpenBatches+1)
	}
	e = stockReply(t, a.nc, stockMsg("hs.x", "open-1", 2, true, []byte("late")))
	if !errors.Is(e, semaq.ErrBatchAbandoned) {
		t.Fatalf("the commit of an abandoned batch: %v, want ErrBatchAbandoned", e)
	}
	if n := stored(t, c, "HS"); n != 2 {
		t.Fatalf("HS holds %d messages, want the committed batch's 2", n)
	}
	// The connection opens as many batches again, under the same ids.
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := jetstreamext.PublishMsgBatch(ctxT(t), js, []*nats.Msg{bmsg("hs.x", "1"), bmsg("hs.x", "2"), bmsg("hs.x", "3")})
	if err != nil || ack.BatchSize != 3 || ack.Sequence != 5 {
		t.Fatalf("a batch after the abandoned ones: %+v %v", ack, err)
	}
	for i := range semaq.MaxOpenBatches {
		if e := stockReply(t, a.nc, stockMsg("hs.x", fmt.Sprint("open-", i), 1, false, []byte("x"))); e != nil {
			t.Fatalf("batch %d again: %v", i, e)
		}
	}
}

// A stock client's batch holds at most MaxBatchBytes: past them the batch
// is refused and nothing of it is stored.
func TestStockBatchOverBytesRefused(t *testing.T) {
	t.Parallel()
	const maxPayload = 4 << 20
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.MaxPayload = maxPayload })
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "HY", "hy.>")
	nc := connectAttacker(t, s).nc
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, maxPayload-1024)
	var msgs []*nats.Msg
	for range semaq.MaxBatchBytes/len(data) + 1 {
		msgs = append(msgs, &nats.Msg{Subject: "hy.x", Data: data})
	}
	_, err = jetstreamext.PublishMsgBatch(ctxT(t), js, msgs)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(semaq.MaxBatchBytes)) {
		t.Fatalf("a batch of %d bytes: %v, want a refusal naming the bound", len(msgs)*len(data), err)
	}
	if n := stored(t, c, "HY"); n != 0 {
		t.Fatalf("HY holds %d messages, want none", n)
	}
	waitMetric(t, s, 0, 10*time.Second, "semaq_batches_open")
}

// The inbox where nodes forward a stock batch's messages to the node that
// holds the batch (its reply in Semaq-Forward-Reply, trusted there) is the
// nodes' own: a client's publish or subscription on it is refused by the
// server.
func TestStockBatchForwardInboxIsTheNodes(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	a := connectAttacker(t, srv)
	const subject = "_SQ_SB.n1.victim.x"
	m := nats.NewMsg(subject)
	m.Header.Set("Semaq-Forward-Reply", "$JS.API.STREAM.DELETE.VICTIM")
	m.Header.Set(semaq.HdrBatchID, "forged")
	m.Header.Set(semaq.HdrBatchSeq, "1")
	if err := a.nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	a.refused(t, subject)
	if _, err := a.nc.SubscribeSync("_SQ_SB.>"); err != nil {
		t.Fatal(err)
	}
	a.refused(t, "_SQ_SB.>")
}
