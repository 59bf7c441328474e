package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// eoFn is the function the processor tests run: input i (data "i") makes
// i%3 outputs, "i-k" on out.<i>.<k>.
func eoFn(m *client.Msg) ([]client.Out, error) {
	i, err := strconv.Atoi(string(m.Data))
	if err != nil {
		return nil, client.Term(err)
	}
	var outs []client.Out
	for k := range i % 3 {
		outs = append(outs, client.Out{Subject: fmt.Sprintf("out.%d.%d", i, k), Data: fmt.Appendf(nil, "%d-%d", i, k),
			// The processor's own headers replace a function's.
			Header: nats.Header{"X-Kind": {"line"}, semaq.HdrMsgID: {"mine"}, "semaq-source-seq": {"999"}}})
	}
	return outs, nil
}

// eoWant is what eoFn makes of inputs from..to, in order.
func eoWant(from, to int) []string {
	var want []string
	for i := from; i <= to; i++ {
		for k := range i % 3 {
			want = append(want, fmt.Sprintf("out.%d.%d %d-%d", i, k, i, k))
		}
	}
	return want
}

// eoBroker starts a broker with the input stream IN (in.>) and the output
// stream OUT (out.>).
func eoBroker(t *testing.T, opts ...func(*broker.Config)) (*broker.Server, *client.Client) {
	t.Helper()
	s := brokertest.Start(t, opts...)
	var c *client.Client
	if s.Config().Auth {
		c = brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	} else {
		c = brokertest.Connect(t, s)
	}
	brokertest.AddStream(t, c, "IN", "in.>")
	brokertest.AddStream(t, c, "OUT", "out.>")
	return s, c
}

func publishInputs(t *testing.T, c *client.Client, from, to int, h nats.Header) {
	t.Helper()
	for i := from; i <= to; i++ {
		m := &nats.Msg{Subject: fmt.Sprintf("in.%d", i), Data: []byte(strconv.Itoa(i)), Header: nats.Header{}}
		for k, v := range h {
			m.Header[k] = v
		}
		if _, err := c.PublishMsg(testCtx(t), m); err != nil {
			t.Fatalf("input %d: %v", i, err)
		}
	}
}

// storedOutputs reads every message of OUT, as "subject data".
func storedOutputs(t *testing.T, c *client.Client) ([]string, []*client.Msg) {
	t.Helper()
	ctx := testCtx(t)
	info, err := c.StreamInfo(ctx, "OUT")
	if err != nil {
		t.Fatal(err)
	}
	n := int(info.State.Messages)
	if n == 0 {
		return nil, nil
	}
	sub, err := c.Subscribe(ctx, "out.>", client.WithMaxMessages(n))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var got []string
	var msgs []*client.Msg
	for range n {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.Subject+" "+string(m.Data))
		msgs = append(msgs, m)
	}
	return got, msgs
}

func sameList(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("outputs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// running is a processor run by a test.
type running struct {
	t      *testing.T
	cancel context.CancelFunc
	ch     chan error
	once   sync.Once
	err    error
}

// runProcessor runs a processor until stop, at the latest when the test
// ends.
func runProcessor(t *testing.T, c *client.Client, fn func(*client.Msg) ([]client.Out, error), opts ...client.ProcessOption) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, cancel: cancel, ch: make(chan error, 1)}
	go func() { r.ch <- c.ProcessExactlyOnce(ctx, "in.>", "transformer", fn, opts...) }()
	t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels the processor and returns what it returned.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.ch
	})
	return r.err
}

// waitFor waits for cond, failing the test at once if the processor
// returns first.
func (r *running) waitFor(cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case err := <-r.ch:
			r.ch <- err
			r.t.Fatalf("the processor returned: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatal("condition not met within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// consumerState is the processor's durable consumer as JetStream has it.
func consumerState(t *testing.T, s *broker.Server) *jetstream.ConsumerInfo {
	t.Helper()
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(testCtx(t), "IN", "transformer")
	if err != nil {
		t.Fatal(err)
	}
	return cons.CachedInfo()
}

func TestProcessExactlyOnceOutputs(t *testing.T) {
	t.Parallel()
	s, c := eoBroker(t)
	publishInputs(t, c, 1, 10, nats.Header{semaq.HdrTraceParent: {testTrace}})
	var st client.ProcessStats
	p := runProcessor(t, c, eoFn, client.OutputSubjects("out.>"), client.WithProcessStats(&st))
	p.waitFor(func() bool { return st.Processed.Load() == 10 })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped processor: %v, want context.Canceled", err)
	}
	got, msgs := storedOutputs(t, c)
	sameList(t, got, eoWant(1, 10))
	in, err := c.StreamInfo(testCtx(t), "IN")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		i, k, _ := strings.Cut(strings.TrimPrefix(m.Subject, "out."), ".")
		want := map[string]string{
			semaq.HdrMsgID:        "IN:" + i + ":" + k, // input i is stream seq i
			semaq.HdrSourceStream: "IN",
			semaq.HdrSourceSeq:    i,
			semaq.HdrProcessor:    "transformer",
			"X-Kind":              "line",
		}
		for h, v := range want {
			if got := m.Header.Values(h); len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s = %q, want %q", m.Subject, h, got, v)
			}
		}
		if got := m.Header.Values("semaq-source-seq"); len(got) != 0 {
			t.Errorf("%s: the function's semaq-source-seq %q was kept", m.Subject, got)
		}
		if tp := m.Header.Get(semaq.HdrTraceParent); !strings.HasPrefix(tp, testTrace[:36]) {
			t.Errorf("%s: traceparent %q is not of the input's trace %s", m.Subject, tp, testTrace)
		}
	}
	if in.State.Messages != 10 {
		t.Fatalf("IN holds %d messages, want 10", in.State.Messages)
	}
	if ci := consumerState(t, s); ci.AckFloor.Stream != 10 || ci.NumAckPending != 0 || ci.NumPending != 0 {
		t.Fatalf("consumer: ack floor %d, %d pending ack, %d pending: want every input acked", ci.AckFloor.Stream, ci.NumAckPending, ci.NumPending)
	}
	if st.Skipped.Load()+st.Duplicates.Load()+st.Failed.Load() != 0 {
		t.Fatalf("stats: %d skipped, %d duplicates, %d failed; want none", st.Skipped.Load(), st.Duplicates.Load(), st.Failed.Load())
	}
}

// Refusals the processor makes itself stop it with an error naming the
// input, which stays unacked.
func TestProcessExactlyOnceRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(*client.Msg) ([]client.Out, error)
		opts []client.ProcessOption
		want []string
	}{
		{"over 1000 outputs", func(*client.Msg) ([]client.Out, error) {
			outs := make([]client.Out, semaq.MaxBatchMsgs+1)
			for i := range outs {
				outs[i] = client.Out{Subject: "out.x", Data: []byte("x")}
			}
			return outs, nil
		}, []client.ProcessOption{client.OutputSubjects("out.>")}, []string{"input IN seq 1 (in.1)", "1001 outputs", "1000"}},
		{"outside the output subjects", func(*client.Msg) ([]client.Out, error) {
			return []client.Out{{Subject: "out.a", Data: []byte("a")}, {Subject: "other.b", Data: []byte("b")}}, nil
		}, []client.ProcessOption{client.OutputSubjects("out.a", "out.c.*")}, []string{"input IN seq 1", "output 1 is on other.b, outside the OutputSubjects"}},
		{"no output subjects", func(*client.Msg) ([]client.Out, error) {
			return []client.Out{{Subject: "out.a", Data: []byte("a")}}, nil
		}, nil, []string{"input IN seq 1", "no OutputSubjects"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, c := eoBroker(t)
			publishInputs(t, c, 1, 2, nil)
			ctx := testCtx(t)
			err := c.ProcessExactlyOnce(ctx, "in.>", "transformer", tc.fn, tc.opts...)
			if err == nil || ctx.Err() != nil {
				t.Fatalf("processor: %v, want a refusal", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if got, _ := storedOutputs(t, c); len(got) != 0 {
				t.Fatalf("outputs stored: %v", got)
			}
			if ci := consumerState(t, s); ci.AckFloor.Stream != 0 {
				t.Fatalf("consumer's ack floor is %d: an input was acked", ci.AckFloor.Stream)
			}
		})
	}
}

// A processor stopped after committing an input's batch and before
// acking it: its successor skips the input, by the resume point, and
// writes no duplicate.
func TestProcessExactlyOnceCrashAfterCommit(t *testing.T) {
	t.Parallel()
	s, c := eoBroker(t)
	publishInputs(t, c, 1, 8, nil)
	ctx, cancel := context.WithCancel(testCtx(t))
	err := c.ProcessExactlyOnce(ctx, "in.>", "transformer", eoFn, client.OutputSubjects("out.>"),
		client.WithAfterCommit(func(m *client.Msg, err error) error {
			if m.Seq == 5 && err == nil {
				cancel() // the crash: committed, never acked
			}
			return err
		}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("first processor: %v, want context.Canceled", err)
	}
	if ci := consumerState(t, s); ci.AckFloor.Stream != 4 {
		t.Fatalf("ack floor %d after the crash, want 4", ci.AckFloor.Stream)
	}
	got, _ := storedOutputs(t, c)
	sameList(t, got, eoWant(1, 5))

	var st client.ProcessStats
	p := runProcessor(t, c, eoFn, client.OutputSubjects("out.>"), client.WithProcessStats(&st))
	p.waitFor(func() bool { return st.Processed.Load() == 3 })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if st.Skipped.Load() != 1 {
		t.Fatalf("%d inputs skipped, want 1 (input 5)", st.Skipped.Load())
	}
	got, _ = storedOutputs(t, c)
	sameList(t, got, eoWant(1, 8))
}

// A commit whose answer was lost is sent again with the same message ids:
// JetStream refuses a batch whole as a duplicate (10201), and answers a
// single output as a duplicate; the processor takes both for committed.
func TestProcessExactlyOnceLostAnswer(t *testing.T) {
	t.Parallel()
	_, c := eoBroker(t)
	publishInputs(t, c, 1, 6, nil)
	var st client.ProcessStats
	var lost [7]atomic.Bool
	p := runProcessor(t, c, eoFn, client.OutputSubjects("out.>"), client.WithProcessStats(&st),
		client.WithAfterCommit(func(m *client.Msg, err error) error {
			// Input 4 has one output, published alone; input 5 two, in
			// an atomic batch.
			if (m.Seq == 4 || m.Seq == 5) && err == nil && lost[m.Seq].CompareAndSwap(false, true) {
				return semaq.NewAPIError(semaq.ErrUnavailable, "test: the answer was lost")
			}
			return err
		}))
	p.waitFor(func() bool { return st.Processed.Load() == 6 })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if st.Duplicates.Load() != 2 || st.Retries.Load() != 2 {
		t.Fatalf("%d duplicates, %d retries; want 2 and 2", st.Duplicates.Load(), st.Retries.Load())
	}
	got, _ := storedOutputs(t, c)
	sameList(t, got, eoWant(1, 6))
}

// Past the duplicate window JetStream no longer knows the outputs' ids:
// only the resume point keeps them from being written again. The test
// makes that state directly rather than waiting out a window: outputs of
// inputs 1..4 stored as the processor stores them but without message ids
// (so JetStream has no dedup entry for them), and a durable consumer that
// never acked them.
func TestProcessExactlyOncePastDuplicateWindow(t *testing.T) {
	t.Parallel()
	s, c := eoBroker(t)
	publishInputs(t, c, 1, 7, nil)
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		for k := range i % 3 {
			m := nats.NewMsg(fmt.Sprintf("out.%d.%d", i, k))
			m.Data = fmt.Appendf(nil, "%d-%d", i, k)
			m.Header.Set(semaq.HdrSourceStream, "IN")
			m.Header.Set(semaq.HdrSourceSeq, strconv.Itoa(i))
			m.Header.Set(semaq.HdrProcessor, "transformer")
			if _, err := js.PublishMsg(testCtx(t), m); err != nil {
				t.Fatal(err)
			}
		}
	}
	var st client.ProcessStats
	p := runProcessor(t, c, eoFn, client.OutputSubjects("out.>"), client.WithProcessStats(&st))
	p.waitFor(func() bool { return st.Processed.Load() == 3 })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if st.Skipped.Load() != 4 || st.Duplicates.Load() != 0 {
		t.Fatalf("%d skipped, %d duplicates; want 4 and 0", st.Skipped.Load(), st.Duplicates.Load())
	}
	got, _ := storedOutputs(t, c)
	sameList(t, got, eoWant(1, 7))
}

// A last output not written by the processor stops it: the resume point
// cannot be trusted.
func TestProcessExactlyOnceForeignOutput(t *testing.T) {
	t.Parallel()
	_, c := eoBroker(t)
	publishInputs(t, c, 1, 1, nil)
	if _, err := c.Publish(testCtx(t), "out.x", []byte("someone else")); err != nil {
		t.Fatal(err)
	}
	err := c.ProcessExactlyOnce(testCtx(t), "in.>", "transformer", eoFn, client.OutputSubjects("out.>"))
	if err == nil || !strings.Contains(err.Error(), "was not written by it") {
		t.Fatalf("processor: %v, want a refusal of the foreign output", err)
	}
}

// A function error hands the input back and it is processed again, in
// order; Term terminates it.
func TestProcessExactlyOnceFunctionErrors(t *testing.T) {
	t.Parallel()
	s, c := eoBroker(t)
	publishInputs(t, c, 1, 6, nil)
	var st client.ProcessStats
	var calls atomic.Int32
	var seen []uint64 // on the processor's goroutine only, read after stop
	p := runProcessor(t, c, func(m *client.Msg) ([]client.Out, error) {
		seen = append(seen, m.Seq)
		switch {
		case m.Seq == 3 && calls.Add(1) == 1:
			return nil, errors.New("test: transient failure")
		case m.Seq == 4:
			return nil, client.Term(errors.New("test: poison"))
		}
		return eoFn(m)
	}, client.OutputSubjects("out.>"), client.WithProcessStats(&st), client.WithRetryDelay(0))
	p.waitFor(func() bool { return st.Processed.Load() == 5 })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[1 2 3 3 4 5 6]" {
		t.Fatalf("fn saw inputs %v, want [1 2 3 3 4 5 6]", seen)
	}
	if st.Failed.Load() != 1 || st.Terminated.Load() != 1 {
		t.Fatalf("%d failed, %d terminated; want 1 and 1", st.Failed.Load(), st.Terminated.Load())
	}
	want := append(eoWant(1, 3), eoWant(5, 6)...)
	got, _ := storedOutputs(t, c)
	sameList(t, got, want)
	if ci := consumerState(t, s); ci.AckFloor.Stream != 6 {
		t.Fatalf("ack floor %d, want 6", ci.AckFloor.Stream)
	}
}

// With auth, a processor whose user may read the inputs (and its output
// subjects, for the resume point) but not publish gets a permission
// error and acks nothing; a service granted both processes.
func TestProcessExactlyOnceAuth(t *testing.T) {
	t.Parallel()
	s, admin := eoBroker(t, brokertest.WithAuth)
	publishInputs(t, admin, 1, 4, nil)
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "eo-reader", Role: semaq.RoleReader, Subjects: []string{"in.>", "out.>"}},
		{Name: "eo-service", Role: semaq.RoleService, Subjects: []string{"in.>", "out.>"}},
	} {
		r, err := admin.AddUser(testCtx(t), u)
		if err != nil {
			t.Fatal(err)
		}
		keys[u.Name] = r.Key
	}
	reader := brokertest.ConnectKey(t, s, keys["eo-reader"])
	ctx := testCtx(t)
	err := reader.ProcessExactlyOnce(ctx, "in.>", "transformer", eoFn, client.OutputSubjects("out.>"))
	if !errors.Is(err, semaq.ErrForbidden) || !strings.Contains(err.Error(), "input IN seq 1") || ctx.Err() != nil {
		t.Fatalf("reader's processor: %v, want a permission error naming input 1", err)
	}
	if ci := consumerState(t, s); ci.AckFloor.Stream != 0 {
		t.Fatalf("ack floor %d: the reader acked an input", ci.AckFloor.Stream)
	}
	if got, _ := storedOutputs(t, admin); len(got) != 0 {
		t.Fatalf("outputs stored: %v", got)
	}

	service := brokertest.ConnectKey(t, s, keys["eo-service"])
	var st client.ProcessStats
	p := runProcessor(t, service, eoFn, client.OutputSubjects("out.>"), client.WithProcessStats(&st))
	p.waitFor(func() bool { return st.Processed.Load() == 4 })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	got, _ := storedOutputs(t, admin)
	sameList(t, got, eoWant(1, 4))
}

func TestProcessExactlyOnceBadArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  client.ProcessOption
		want string
	}{
		{"no output subject", client.OutputSubjects(), "no subject"},
		{"bad output subject", client.OutputSubjects("out..x"), "OutputSubjects"},
		{"nil stats", client.WithProcessStats(nil), "nil stats"},
		{"retry delay", client.WithRetryDelay(-time.Second), "outside"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cl client.Client
			err := cl.ProcessExactlyOnce(context.Background(), "in.>", "transformer", eoFn, tc.opt)
			if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want ErrBadRequest saying %q", err, tc.want)
			}
		})
	}
}

// An atomic batch sent again after it was stored is refused with
// JetStream's own code, which the processor matches first.
func TestAtomicBatchReplayKeepsJetStreamCode(t *testing.T) {
	t.Parallel()
	_, c := eoBroker(t)
	batch := func() []*nats.Msg {
		return []*nats.Msg{
			{Subject: "out.a", Data: []byte("a"), Header: nats.Header{semaq.HdrMsgID: {"IN:1:0"}}},
			{Subject: "out.b", Data: []byte("b"), Header: nats.Header{semaq.HdrMsgID: {"IN:1:1"}}},
		}
	}
	if _, err := c.PublishBatch(testCtx(t), batch(), client.Atomic()); err != nil {
		t.Fatal(err)
	}
	ack, err := c.PublishBatch(testCtx(t), batch(), client.Atomic())
	ae, ok := errors.AsType[*semaq.APIError](err)
	if !ok || ae.ErrCode != 10201 || ack == nil || ack.Stored != 0 {
		t.Fatalf("replayed batch: %#v (ack %+v), want JetStream's error 10201 and nothing stored", err, ack)
	}
	if got, _ := storedOutputs(t, c); len(got) != 2 {
		t.Fatalf("OUT holds %v, want the first batch's 2 messages", got)
	}
}

// With GroupInputs, the outputs of inputs already stored are committed
// several inputs to a batch; each input's outputs are still exactly f of
// it, and a crash after a group's commit skips the whole group.
func TestProcessExactlyOnceGrouped(t *testing.T) {
	t.Parallel()
	s, c := eoBroker(t)
	publishInputs(t, c, 1, 30, nil)
	var st client.ProcessStats
	var commits atomic.Int32
	ctx, cancel := context.WithCancel(testCtx(t))
	err := c.ProcessExactlyOnce(ctx, "in.>", "transformer", eoFn, client.OutputSubjects("out.>"),
		client.GroupInputs(8), client.WithProcessStats(&st),
		client.WithAfterCommit(func(m *client.Msg, err error) error {
			if commits.Add(1) == 2 && err == nil {
				cancel() // the crash: the second group committed, not acked
			}
			return err
		}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("first processor: %v, want context.Canceled", err)
	}
	if st.Processed.Load() != 8 {
		t.Fatalf("%d inputs processed before the crash, want the first group's 8", st.Processed.Load())
	}
	// The second group reached input r, its last with outputs (the read
	// ahead hands back what is stored after its first input; how many
	// depends on the broker's answer).
	got, msgs := storedOutputs(t, c)
	r, _ := strconv.Atoi(msgs[len(msgs)-1].Header.Get(semaq.HdrSourceSeq))
	if r <= 9 {
		t.Fatalf("the second group ends at input %d: it grouped nothing", r)
	}
	sameList(t, got, eoWant(1, r))

	var st2 client.ProcessStats
	p := runProcessor(t, c, eoFn, client.OutputSubjects("out.>"), client.GroupInputs(8), client.WithProcessStats(&st2))
	p.waitFor(func() bool { return st2.Processed.Load() == uint64(30-r) })
	if err := p.stop(); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// 9..r skipped by the resume point.
	if st2.Skipped.Load() != uint64(r-8) || st2.Duplicates.Load() != 0 {
		t.Fatalf("%d skipped, %d duplicates; want %d and 0", st2.Skipped.Load(), st2.Duplicates.Load(), r-8)
	}
	got, msgs = storedOutputs(t, c)
	sameList(t, got, eoWant(1, 30))
	for _, m := range msgs {
		i, k, _ := strings.Cut(strings.TrimPrefix(m.Subject, "out."), ".")
		if id := m.Header.Get(semaq.HdrMsgID); id != "IN:"+i+":"+k || m.Header.Get(semaq.HdrSourceSeq) != i {
			t.Fatalf("%s: id %q, source seq %q", m.Subject, id, m.Header.Get(semaq.HdrSourceSeq))
		}
	}
	if ci := consumerState(t, s); ci.AckFloor.Stream != 30 || ci.NumAckPending != 0 {
		t.Fatalf("consumer: ack floor %d, %d pending ack; want every input acked", ci.AckFloor.Stream, ci.NumAckPending)
	}
}
