package dispatch

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/semaq"
)

// The paced phases' two sides, the load generator and the workers, are the
// same code whether they run as goroutines of the bench process or in child
// processes of their own (procs.go): they only need the broker's URL.

// hdrDispatchSent carries the time a request was published, in Unix
// nanoseconds (not since a phase's epoch like the ingest's hdrSent in
// package bench: the worker reading it may be another process), so a
// worker can measure the wait end to end: publish call to the job in its
// hands, client libraries and both connections included, which the
// broker's Semaq-Wait (ingress to dispatch) leaves out.
const hdrDispatchSent = "Bench-Sent"

// loadSpec is one paced publisher of a phase.
type loadSpec struct {
	Name     string `json:"name"` // what the report calls it: critical, bulk, A, B
	Rate     int    `json:"rate"` // requests per second
	Priority string `json:"priority,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	Tokens   int    `json:"tokens"`
}

func (l loadSpec) header() nats.Header {
	h := nats.Header{}
	if l.Priority != "" {
		h.Set(semaq.HdrPriority, l.Priority)
	}
	if l.Tenant != "" {
		h.Set(semaq.HdrTenant, l.Tenant)
	}
	h.Set(semaq.HdrPromptTokens, strconv.Itoa(l.Tokens))
	return h
}

// phaseSpec is what both sides of a paced phase need to know.
type phaseSpec struct {
	Queue    string        `json:"queue"`
	Subject  string        `json:"subject"`
	Key      string        `json:"key"` // header whose value the waits are recorded under
	Workers  int           `json:"workers"`
	Service  time.Duration `json:"service"`
	Duration time.Duration `json:"duration"`
	Size     int           `json:"size"`
	Loads    []loadSpec    `json:"loads"`
	// AckNoWait: the workers answer with Job.AckNoWait and fetch at once,
	// instead of waiting for Job.Ack's confirmation.
	AckNoWait bool `json:"ack_nowait,omitempty"`
}

// pacedDispatchDrain bounds the wait for the publish acks still in flight
// when a paced phase ends.
const pacedDispatchDrain = 10 * time.Second

// generate publishes each load at its rate until ctx ends, asynchronously
// through the ingress, each request stamped with its send time; it returns
// how many were refused or failed.
func generate(ctx context.Context, nc *nats.Conn, subject string, data []byte, loads []loadSpec) (int64, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, err
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, l := range loads {
		tmpl := l.header()
		wg.Add(1)
		go func() {
			defer wg.Done()
			const tick = 5 * time.Millisecond
			t := time.NewTicker(tick)
			defer t.Stop()
			start := time.Now()
			sent := 0
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					due := int(now.Sub(start).Seconds() * float64(l.Rate))
					for ; sent < due; sent++ {
						m := nats.NewMsg(subject)
						m.Data = data
						for k, v := range tmpl {
							m.Header[k] = v
						}
						m.Header.Set(hdrDispatchSent, strconv.FormatInt(time.Now().UnixNano(), 10))
						if _, err := js.PublishMsgAsync(m); err != nil {
							failed.Add(1)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(pacedDispatchDrain):
	}
	return failed.Load(), nil
}

// waits records, by the value of the phase's key header, each job's queue
// wait as the broker measured it (Semaq-Wait) and end to end (hdrDispatchSent
// to the worker's fetch returning); and under turnaround the workers' own
// times: "service" (the simulated inference as it really took, sleep
// overshoot included), and the round trips between two jobs, "ack"
// (Job.Ack confirmed) and "fetch" (a fetch that returned a job), the time
// a busy worker is not serving.
type waits struct {
	mu         sync.Mutex
	broker     map[string]*measure.Histogram
	e2e        map[string]*measure.Histogram
	turnaround map[string]*measure.Histogram
}

// Keys of waits.turnaround.
const (
	turnService = "service"
	turnAck     = "ack"
	turnFetch   = "fetch"
)

func newWaits() *waits {
	return &waits{broker: map[string]*measure.Histogram{}, e2e: map[string]*measure.Histogram{}, turnaround: map[string]*measure.Histogram{}}
}

func (w *waits) turn(key string, d time.Duration) {
	w.mu.Lock()
	recordIn(w.turnaround, key, d)
	w.mu.Unlock()
}

// turnSummary is the workers' round trip under key (turnAck, turnFetch).
func (w *waits) turnSummary(key string) measure.Latency {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.turnaround[key]; h != nil {
		return h.Summary()
	}
	return measure.Latency{}
}

func recordIn(by map[string]*measure.Histogram, key string, d time.Duration) {
	h := by[key]
	if h == nil {
		h = measure.NewHistogram()
		by[key] = h
	}
	h.Record(d)
}

func (w *waits) record(key string, broker, e2e time.Duration) {
	w.mu.Lock()
	recordIn(w.broker, key, broker)
	if e2e > 0 {
		recordIn(w.e2e, key, e2e)
	}
	w.mu.Unlock()
}

// merge adds o's recordings to w.
func (w *waits) merge(o *waits) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pair := range []struct{ dst, src map[string]*measure.Histogram }{{w.broker, o.broker}, {w.e2e, o.e2e}, {w.turnaround, o.turnaround}} {
		for k, h := range pair.src {
			if pair.dst[k] == nil {
				pair.dst[k] = measure.NewHistogram()
			}
			pair.dst[k].Merge(h)
		}
	}
}

// summary is the broker-measured wait under key, how many were served,
// and the end-to-end wait.
func (w *waits) summary(key string) (broker measure.Latency, n int64, e2e measure.Latency) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.broker[key]; h != nil {
		broker, n = h.Summary(), h.Count()
	}
	if h := w.e2e[key]; h != nil {
		e2e = h.Summary()
	}
	return broker, n, e2e
}

// serve runs one worker per client on the phase's queue until ctx ends:
// each fetches one request, serves it for spec.Service, acks it, and
// records its waits.
func serve(ctx context.Context, workers []*client.Client, spec phaseSpec, w *waits) {
	var wg sync.WaitGroup
	for _, c := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				asked := time.Now()
				jobs, err := c.Fetch(ctx, spec.Queue, client.FetchWait(200*time.Millisecond))
				if err != nil {
					continue
				}
				got := time.Now()
				if len(jobs) > 0 {
					w.turn(turnFetch, got.Sub(asked))
				}
				for _, j := range jobs {
					var e2e time.Duration
					if ns, err := strconv.ParseInt(j.Header.Get(hdrDispatchSent), 10, 64); err == nil {
						e2e = got.Sub(time.Unix(0, ns))
					}
					w.record(j.Header.Get(spec.Key), j.Waited, e2e)
					if spec.Service > 0 {
						t := time.Now()
						time.Sleep(spec.Service) // the simulated inference
						w.turn(turnService, time.Since(t))
					}
					actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					t := time.Now()
					ack := func() error { return j.Ack(actx, client.AckOutputTokens(j.Tokens)) }
					if spec.AckNoWait {
						ack = func() error { return j.AckNoWait(client.AckOutputTokens(j.Tokens)) }
					}
					if ack() == nil {
						w.turn(turnAck, time.Since(t))
					}
					cancel()
				}
			}
		}()
	}
	wg.Wait()
}
