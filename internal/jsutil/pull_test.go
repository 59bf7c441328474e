package jsutil_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/internal/jsutil"
)

func TestNoMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrTimeout, true},
		{jetstream.ErrNoMessages, true},
		{context.DeadlineExceeded, true},
		{jetstream.ErrNoHeartbeat, true},
		{jetstream.ErrConsumerLeadershipChanged, true},
		{fmt.Errorf("pull: %w", nats.ErrTimeout), true},
		{jetstream.ErrConsumerDeleted, false},
		{jetstream.ErrBadRequest, false},
		{nats.ErrConnectionClosed, false},
		{nats.ErrNoResponders, false},
		{context.Canceled, false},
		{errors.New("nats: something else"), false},
	} {
		if got := jsutil.NoMessage(tc.err); got != tc.want {
			t.Errorf("NoMessage(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// scriptedConsumer answers each Fetch with the next scripted batch.
type scriptedConsumer struct {
	jetstream.Consumer // only Fetch is called
	batches            []scriptedBatch
	fetches            int
}

type scriptedBatch struct {
	msgs     []string // subjects
	err      error    // what the pull ended with
	fetchErr error    // what Fetch itself returns
}

func (c *scriptedConsumer) Fetch(int, ...jetstream.FetchOpt) (jetstream.MessageBatch, error) {
	if c.fetches == len(c.batches) {
		return nil, errors.New("script exhausted")
	}
	b := c.batches[c.fetches]
	c.fetches++
	if b.fetchErr != nil {
		return nil, b.fetchErr
	}
	ch := make(chan jetstream.Msg, len(b.msgs))
	for _, s := range b.msgs {
		ch <- subjectMsg{subject: s}
	}
	close(ch)
	return doneBatch{ch, b.err}, nil
}

type doneBatch struct {
	msgs chan jetstream.Msg
	err  error
}

func (b doneBatch) Messages() <-chan jetstream.Msg { return b.msgs }
func (b doneBatch) Error() error                   { return b.err }

type subjectMsg struct {
	jetstream.Msg // only Subject is called
	subject       string
}

func (m subjectMsg) Subject() string { return m.subject }

// A pull that ends without a message is pulled again, whichever way it
// ended; any other end is the caller's.
func TestPullerPullsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := &scriptedConsumer{batches: []scriptedBatch{
		{err: nats.ErrTimeout},
		{err: jetstream.ErrNoMessages},
		{err: jetstream.ErrConsumerLeadershipChanged},
		{err: jetstream.ErrNoHeartbeat},
		{err: context.DeadlineExceeded},
		{},
		{msgs: []string{"a", "b"}},
		{msgs: []string{"c"}, err: jetstream.ErrConsumerDeleted},
		{fetchErr: nats.ErrConnectionClosed},
	}}
	p := jsutil.NewPuller(c)
	for _, want := range []string{"a", "b", "c"} {
		m, err := p.Next(ctx, nil, 2)
		if err != nil || m.Subject() != want {
			t.Fatalf("Next = %v, %v; want %s", m, err, want)
		}
	}
	if c.fetches != 8 {
		t.Fatalf("%d fetches for three messages, want 8", c.fetches)
	}
	if _, err := p.Next(ctx, nil, 2); !errors.Is(err, jetstream.ErrConsumerDeleted) {
		t.Fatalf("Next after a deleted consumer = %v", err)
	}
	if _, err := p.Next(ctx, nil, 2); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Next after a failed Fetch = %v", err)
	}
}

// Next ends with its stop channel and its context, before fetching.
func TestPullerStops(t *testing.T) {
	t.Parallel()
	c := &scriptedConsumer{}
	p := jsutil.NewPuller(c)
	stop := make(chan struct{})
	close(stop)
	if _, err := p.Next(context.Background(), stop, 1); !errors.Is(err, jsutil.ErrPullStopped) {
		t.Fatalf("Next after stop = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Next(ctx, nil, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel = %v", err)
	}
	if c.fetches != 0 {
		t.Fatalf("%d fetches after the end", c.fetches)
	}
}

// Against a real server: batches of n, empty pulls repeated until the
// caller's deadline, the unread rest of a batch handed to Drain, and a
// consumer deleted under a waiting pull ends Next.
func TestPullerServer(t *testing.T) {
	t.Parallel()
	ns := jstest.Server(t)
	_, js := jstest.Connect(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p.>"}}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "P", jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	p := jsutil.NewPuller(cons)
	wait := jetstream.FetchMaxWait(50 * time.Millisecond)

	// Empty: pulled again and again until the caller gives up.
	short, stopShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = p.Next(short, nil, 2, wait)
	stopShort()
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Next on an empty stream = %v, want the caller's deadline", err)
	}

	for i := range 4 {
		if _, err := js.Publish(ctx, fmt.Sprintf("p.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		m, err := p.Next(ctx, nil, 2, wait)
		if err != nil || m.Subject() != fmt.Sprintf("p.%d", i) {
			t.Fatalf("Next = %v, %v; want p.%d", m, err, i)
		}
		_ = m.Ack()
	}
	// The batch of p.2 and p.3: Drain gets what Next did not hand out.
	var drained []string
	p.Drain(time.Second, func(m jetstream.Msg) { drained = append(drained, m.Subject()); _ = m.Nak() })
	if len(drained) != 1 || drained[0] != "p.3" {
		t.Fatalf("drained %v, want [p.3]", drained)
	}
	m, err := p.Next(ctx, nil, 1, wait)
	if err != nil || m.Subject() != "p.3" {
		t.Fatalf("Next after Drain = %v, %v; want p.3 again", m, err)
	}
	_ = m.Ack()

	// A consumer deleted under a waiting pull ends it with an error.
	gone := make(chan error, 1)
	go func() {
		for {
			if _, err := p.Next(ctx, nil, 1, jetstream.FetchMaxWait(5*time.Second)); err != nil {
				gone <- err
				return
			}
		}
	}()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumWaiting > 0 {
			break
		}
	}
	if err := js.DeleteConsumer(ctx, "P", "d"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-gone:
		t.Logf("Next under a deleted consumer: %v", err)
		if jsutil.NoMessage(err) {
			t.Fatalf("Next under a deleted consumer = %v, taken for an empty pull", err)
		}
	case <-ctx.Done():
		t.Fatal("Next kept waiting on a deleted consumer")
	}
}
