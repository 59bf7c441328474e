package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/semaq"
)

// fairness backlogs two tenants, A with small requests and B with large
// ones, and serves a fixed number of requests, tracking the largest gap in
// tokens served between them.
func (d *dispatchRun) fairness(ctx context.Context, rep *bench.DispatchReport) error {
	const name, n = "FAIR", 400
	const sizeA, sizeB = 100, 1000
	admin, err := d.queue(ctx, name)
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := admin.Publish(ctx, "bench.FAIR.req", d.data, client.WithTenant("A"), client.WithPromptTokens(sizeA)); err != nil {
			return err
		}
		if i%4 == 0 {
			if _, err := admin.Publish(ctx, "bench.FAIR.req", d.data, client.WithTenant("B"), client.WithPromptTokens(sizeB)); err != nil {
				return err
			}
		}
	}
	total := n + n/4
	for deadline := time.Now().Add(30 * time.Second); ; {
		qi, err := admin.QueueInfo(ctx, name)
		if err != nil {
			return err
		}
		if qi.Status.Queued == total {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue holds %d of %d requests", qi.Status.Queued, total)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the dispatcher to index the backlog
	}
	served := map[string]int64{}
	var maxGap int64
	count := 0
	for count < total/2 {
		jobs, err := admin.Fetch(ctx, name)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			served[j.Header.Get(semaq.HdrTenant)] += j.Tokens
			if err := j.Ack(ctx); err != nil {
				return err
			}
			count++
			gap := served["A"] - served["B"]
			maxGap = max(maxGap, gap, -gap)
		}
	}
	_ = admin.DeleteQueue(ctx, name)
	bound := int64(2 * sizeB)
	rep.Fairness = bench.TokenFairness{Requests: count, TokensA: served["A"], TokensB: served["B"], SizeA: sizeA, SizeB: sizeB,
		MaxGap: maxGap, Bound: bound, GapOfBound: measure.Round2(float64(maxGap) / float64(bound))}
	return nil
}

// throughput drains a backlog of cfg.Drain requests with DrainWorkers
// workers: through the dispatcher (Fetch, Ack confirmed) and from a raw
// JetStream workqueue stream with a pull consumer (Fetch, AckSync), in
// alternating order over cfg.Rounds rounds.
func (d *dispatchRun) throughput(ctx context.Context, rep *bench.DispatchReport) error {
	c := d.cfg
	nc, err := d.op.Connect(d.srv.ClientURL(), nats.Name("bench-raw"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A first round that is not counted: both paths get their
	// connections, consumers and caches warm, as they are in service.
	if _, err := d.drainSemaq(ctx); err != nil {
		return err
	}
	if _, err := d.drainRaw(ctx, js); err != nil {
		return err
	}
	var semaqRates, rawRates, ratios []float64
	for round := range c.Rounds {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		var rs, rr float64
		for _, semaqFirst := range order {
			if semaqFirst {
				if rs, err = d.drainSemaq(ctx); err != nil {
					return err
				}
			} else {
				if rr, err = d.drainRaw(ctx, js); err != nil {
					return err
				}
			}
		}
		semaqRates, rawRates = append(semaqRates, rs), append(rawRates, rr)
		ratios = append(ratios, measure.Round2(rs/rr))
	}
	s, r := measure.Median(semaqRates), measure.Median(rawRates)
	// The ratio is the median of the rounds' ratios: each round runs both
	// targets back to back, so it is the comparison least moved by a busy
	// machine.
	rep.Throughput = bench.DispatchThroughput{Semaq: math.Round(s), Raw: math.Round(r), Ratio: measure.Round2(measure.Median(ratios)), Goal: GoalThroughputRatio,
		Rounds: ratios, Workers: c.DrainWorkers, Batch: c.DrainBatch, Acks: "confirmed"}
	if c.AckNoWait {
		rep.Throughput.Acks = "nowait"
	}
	return nil
}

func (d *dispatchRun) backlog(ctx context.Context, subject string, nc *nats.Conn) error {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	for i := 0; i < d.cfg.Drain; i++ {
		m := nats.NewMsg(subject)
		m.Data = d.data
		m.Header.Set(semaq.HdrPromptTokens, "100")
		for {
			_, err := js.PublishMsgAsync(m)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return err
			}
			// The window is full and not draining fast enough: let it
			// empty, then go on.
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *dispatchRun) drainSemaq(ctx context.Context) (float64, error) {
	const name = "BENCH_Q"
	admin, err := d.queue(ctx, name)
	if err != nil {
		return 0, err
	}
	pub, err := nats.Connect(d.srv.ClientURL())
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	if err := d.backlog(ctx, "bench."+name+".req", pub); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		qi, err := admin.QueueInfo(ctx, name)
		if err != nil {
			return 0, err
		}
		if qi.Status.Queued == d.cfg.Drain {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("queue holds %d of %d", qi.Status.Queued, d.cfg.Drain)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the dispatcher to index the backlog
	}
	steps := make([]func(*atomic.Int64) error, d.cfg.DrainWorkers)
	for i := range steps {
		c, err := d.connect(ctx, "bench-drain-"+strconv.Itoa(i))
		if err != nil {
			return 0, err
		}
		steps[i] = func(done *atomic.Int64) error {
			jobs, err := c.Fetch(ctx, name, client.FetchMax(d.cfg.DrainBatch))
			if err != nil {
				return err
			}
			for _, j := range jobs {
				ack := func() error { return j.Ack(ctx) }
				if d.cfg.AckNoWait {
					ack = func() error { return j.AckNoWait() }
				}
				if err := ack(); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		}
	}
	rate, err := d.drainRate(steps)
	_ = admin.DeleteQueue(ctx, name)
	return rate, err
}

func (d *dispatchRun) drainRaw(ctx context.Context, js jetstream.JetStream) (float64, error) {
	const name = "BENCH_RAWQ"
	_ = js.DeleteStream(ctx, name)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"benchraw.q.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		return 0, err
	}
	nc, err := d.op.Connect(d.srv.ClientURL())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	if err := d.backlog(ctx, "benchraw.q.req", nc); err != nil {
		return 0, err
	}
	_, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1})
	if err != nil {
		return 0, err
	}
	steps := make([]func(*atomic.Int64) error, d.cfg.DrainWorkers)
	for i := range steps {
		wc, err := d.op.Connect(d.srv.ClientURL())
		if err != nil {
			return 0, err
		}
		defer wc.Close()
		wjs, _ := jetstream.New(wc)
		cons, err := wjs.Consumer(ctx, name, "workers")
		if err != nil {
			return 0, err
		}
		steps[i] = func(done *atomic.Int64) error {
			batch, err := cons.FetchNoWait(d.cfg.DrainBatch)
			if err != nil {
				return err
			}
			for m := range batch.Messages() {
				ack := func() error { return m.DoubleAck(ctx) }
				if d.cfg.AckNoWait {
					ack = m.Ack
				}
				if err := ack(); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		}
	}
	rate, err := d.drainRate(steps)
	_ = js.DeleteStream(ctx, name)
	return rate, err
}

// drainRate runs each worker's step until cfg.Drain requests are done, all
// workers started at once, and returns requests per second.
func (d *dispatchRun) drainRate(steps []func(done *atomic.Int64) error) (float64, error) {
	var (
		done atomic.Int64
		wg   sync.WaitGroup
	)
	errs := make(chan error, len(steps))
	start := time.Now()
	for _, step := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(d.cfg.Drain) {
				if err := step(&done); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(d.cfg.Drain) / el.Seconds(), nil
}

func textPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}
