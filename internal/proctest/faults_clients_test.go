package proctest

// The fault run's clients: a stock durable consumer of FA and the queue's
// workers, and what each saw (faults_test.go).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/faults"
	"github.com/semaq/semaq/semaq"
)

// consumerLog is a stock durable pull consumer of FA and every delivery
// it got.
type consumerLog struct {
	urls string
	mu   sync.Mutex
	seen map[string]int
}

func newConsumerLog(t *testing.T, urls string) *consumerLog {
	t.Helper()
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateOrUpdateConsumer(ctx, "FA", jetstream.ConsumerConfig{Durable: "FA_C",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: faultAckWait}); err != nil {
		t.Fatal(err)
	}
	return &consumerLog{urls: urls, seen: map[string]int{}}
}

// run fetches and acks until ctx ends, through failovers.
func (l *consumerLog) run(ctx context.Context) {
	nc, err := nats.Connect(l.urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err := js.Consumer(gctx, "FA", "FA_C")
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // failover: ask again
			}
			continue
		}
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range batch.Messages() {
			l.mu.Lock()
			l.seen[string(m.Data())]++
			l.mu.Unlock()
			_ = m.Ack()
		}
	}
}

func (l *consumerLog) missing(acked []string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, id := range acked {
		if l.seen[id] == 0 {
			n++
		}
	}
	return n
}

func (l *consumerLog) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.seen))
	for k, v := range l.seen {
		out[k] = v
	}
	return out
}

// jobRecord is every job handed to a worker.
type jobRecord struct {
	mu sync.Mutex
	ds []faults.JobDelivery
}

func (r *jobRecord) add(d faults.JobDelivery) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
	return len(r.ds) - 1
}

func (r *jobRecord) settle(i int, err error, unanswered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds[i].Acked, r.ds[i].Settled, r.ds[i].AckUnanswered = err == nil, time.Now(), unanswered
	if err != nil {
		r.ds[i].Err = err.Error()
	}
}

func (r *jobRecord) undone(ids []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := map[string]bool{}
	for _, d := range r.ds {
		if d.Acked {
			done[d.ID] = true
		}
	}
	n := 0
	for _, id := range ids {
		if !done[id] {
			n++
		}
	}
	return n
}

func (r *jobRecord) snapshot() []faults.JobDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]faults.JobDelivery(nil), r.ds...)
}

// faultWorker fetches jobs and acks each until the dispatcher answers,
// recording when each fetch was sent and returned.
func faultWorker(ctx context.Context, name string, cl *client.Client, rec *jobRecord) {
	for ctx.Err() == nil {
		asked := time.Now()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		js, err := cl.Fetch(fctx, "JOBS", client.FetchMax(fetchMax), client.FetchWait(time.Second))
		cancel()
		got := time.Now()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond): // no dispatcher yet: ask again
			}
			continue
		}
		for _, j := range js {
			i := rec.add(faults.JobDelivery{ID: j.ID, Worker: name, Asked: asked, Got: got, Attempts: j.Deliveries})
			unanswered, err := ackJob(ctx, j)
			rec.settle(i, err, unanswered)
		}
	}
}

// ackJob acks j until the dispatcher answers: ok, or a refusal such as
// ErrLeaseLost. unanswered says an ack timed out before: the dispatcher
// may have taken it, and refuses the next because the job is done.
func ackJob(ctx context.Context, j *client.Job) (unanswered bool, err error) {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := j.Ack(actx)
		cancel()
		var apiErr *semaq.APIError
		if err == nil || errors.As(err, &apiErr) && !errors.Is(err, semaq.ErrUnavailable) || ctx.Err() != nil {
			return unanswered, err
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			unanswered = true
		}
		select {
		case <-ctx.Done():
			return unanswered, ctx.Err()
		case <-time.After(50 * time.Millisecond): // polling the dispatcher's return
		}
	}
}
