// Package tokens is `semaq bench tokens`: token streams and the OpenAI
// gateway measured on one embedded broker (a node, for its HTTP front
// door) against raw JetStream in the same run. Three phases: one long
// stream written with client.OpenTokenStream and read with
// client.ReadTokens, every token checked in order, beside raw JetStream
// carrying one message per token; many concurrent streams, both ways; and
// the time to first token of streamed completions through
// POST /v1/chat/completions (gateway, queue, worker, simulated model)
// against calling the simulated model's own server. It writes a report of
// its own (Report), not bench.Report, and shares with the other
// benchmarks only their histograms (bench/measure).
package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// Goals of the token scenario (docs/tokens.md, docs/gateway.md).
const (
	// GoalSingleStreamTokensPerS is the least rate of one token stream,
	// writer to reader, in order.
	GoalSingleStreamTokensPerS = 300_000
	// GoalGatewayP50US and GoalGatewayP99US bound what the gateway adds
	// to the time to first token, against calling the model directly.
	GoalGatewayP50US = 1000.0
	GoalGatewayP99US = 5000.0
)

// Config configures `semaq bench tokens`.
type Config struct {
	// Tokens is the length of the single stream.
	Tokens int `json:"tokens"`
	// Streams concurrent streams of StreamTokens tokens each.
	Streams      int `json:"streams"`
	StreamTokens int `json:"stream_tokens"`
	// Rate is the offered load of the gateway phase in requests/s, for
	// Duration per target; each answer has AnswerTokens tokens.
	Rate         float64       `json:"rate"`
	Duration     time.Duration `json:"duration"`
	AnswerTokens int           `json:"answer_tokens"`
	// Window is the token writers' write window.
	Window int `json:"window"`
	// Dir is the broker's data directory; empty means a temporary one.
	Dir string `json:"-"`
	// Progress receives progress lines; nil discards them.
	Progress io.Writer `json:"-"`
}

// DefaultConfig is what `semaq bench tokens` runs without flags.
func DefaultConfig() Config {
	return Config{Tokens: 1_000_000, Streams: 1000, StreamTokens: 200, Rate: 500, Duration: 10 * time.Second, AnswerTokens: 8, Window: 1024}
}

// Validate reports the first setting out of range.
func (c *Config) Validate() error {
	switch {
	case c.Tokens < 1000 || c.Tokens > 100_000_000:
		return fmt.Errorf("--tokens %d is outside 1000..100000000", c.Tokens)
	case c.Streams < 1 || c.Streams > 100_000:
		return fmt.Errorf("--streams %d is outside 1..100000", c.Streams)
	case c.StreamTokens < 1 || c.StreamTokens > 1_000_000:
		return fmt.Errorf("--stream-tokens %d is outside 1..1000000", c.StreamTokens)
	case c.Rate <= 0 || c.Rate > 100_000:
		return fmt.Errorf("--rate %g is outside 0..100000", c.Rate)
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("--duration %s is under 100ms", c.Duration)
	case c.AnswerTokens < 1 || c.AnswerTokens > 100_000:
		return fmt.Errorf("--answer-tokens %d is outside 1..100000", c.AnswerTokens)
	case c.Window < 1 || c.Window > 65536:
		return fmt.Errorf("--window %d is outside 1..65536", c.Window)
	}
	return nil
}

// Report is the outcome of `semaq bench tokens`; its JSON form is
// the --json output.
type Report struct {
	Scenario string     `json:"scenario"`
	Config   Config     `json:"config"`
	Env      Env        `json:"env"`
	Single   StreamRun  `json:"single_stream"`
	Many     StreamRun  `json:"concurrent_streams"`
	Gateway  GatewayRun `json:"gateway"`
	Goals    GoalResult `json:"goals"`
}

// Env records where the run happened.
type Env struct {
	GoVersion  string `json:"go"`
	Platform   string `json:"platform"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NATSServer string `json:"nats_server"`
	SemaQ      string `json:"semaq"`
}

// StreamRun compares token streams with raw JetStream carrying one message
// per token, same broker, same run.
type StreamRun struct {
	Streams int `json:"streams"`
	Tokens  int `json:"tokens_per_stream"`
	// Semaq and Raw are tokens/s end to end: from the first write to the
	// last reader's last token, every token checked in order.
	Semaq   float64 `json:"semaq_tokens_per_s"`
	Raw     float64 `json:"jetstream_tokens_per_s"`
	Ratio   float64 `json:"ratio"`
	Records int64   `json:"semaq_records"` // records stored: fewer than tokens when writes merged
	// FirstToken is the time from a stream's first write to its reader's
	// first token (semaq).
	FirstToken measure.Latency `json:"semaq_first_token_us"`
}

// GatewayRun is the time to first token of a streamed completion through
// POST /v1/chat/completions (gateway, queue, worker, simulated model,
// token stream) against calling the simulated model's own HTTP server.
type GatewayRun struct {
	Rate     float64 `json:"rate"`
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	// LastError is the last failure, when there were any.
	LastError string          `json:"last_error,omitempty"`
	Direct    measure.Latency `json:"direct_ttft_us"`
	Gateway   measure.Latency `json:"gateway_ttft_us"`
	// Overhead is Gateway minus Direct, quantile by quantile.
	Overhead measure.Latency `json:"overhead_us"`
}

// GoalResult says which goals the run met.
type GoalResult struct {
	SingleStream bool `json:"single_stream_300k"`
	GatewayP50   bool `json:"gateway_overhead_p50_1ms"`
	GatewayP99   bool `json:"gateway_overhead_p99_5ms"`
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Run runs the token scenario on an embedded broker: one long
// stream, many concurrent streams, and the gateway's time to first token.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "semaq-bench-tokens-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bc := broker.DefaultConfig()
	bc.DataDir = filepath.Join(dir, "semaq")
	bc.Listen = "127.0.0.1:0"
	bc.HTTP = "127.0.0.1:0"
	bc.LogLevel = "error"
	op, err := operator.New()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	srv, err := node.New(bc, nil, op.Option()) // the gateway phase needs the HTTP front door
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer srv.Shutdown(context.Background())
	tr := &tokensRun{cfg: cfg, srv: srv, op: op}
	defer tr.close()
	if err := tr.rawStream(ctx); err != nil {
		return nil, err
	}

	rep := &Report{Scenario: "tokens", Config: cfg, Env: Env{
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), NATSServer: server.VERSION, SemaQ: broker.Version,
	}}
	cfg.progress("tokens: one stream of %d tokens", cfg.Tokens)
	if rep.Single, err = tr.streams(ctx, 1, cfg.Tokens); err != nil {
		return nil, fmt.Errorf("bench: single stream: %w", err)
	}
	cfg.progress("tokens: %d concurrent streams of %d tokens", cfg.Streams, cfg.StreamTokens)
	if rep.Many, err = tr.streams(ctx, cfg.Streams, cfg.StreamTokens); err != nil {
		return nil, fmt.Errorf("bench: concurrent streams: %w", err)
	}
	// The streams' consumers are deleted and their records purged in the
	// background; let that finish so the gateway phase measures itself.
	if err := tr.settle(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cfg.progress("tokens: gateway time to first token at %g req/s", cfg.Rate)
	if rep.Gateway, err = tr.gateway(ctx); err != nil {
		return nil, fmt.Errorf("bench: gateway: %w", err)
	}
	rep.Goals = GoalResult{
		SingleStream: rep.Single.Semaq >= GoalSingleStreamTokensPerS,
		GatewayP50:   rep.Gateway.Errors == 0 && rep.Gateway.Overhead.P50 <= GoalGatewayP50US,
		GatewayP99:   rep.Gateway.Errors == 0 && rep.Gateway.Overhead.P99 <= GoalGatewayP99US,
	}
	return rep, nil
}

// rawTokStream is the raw JetStream baseline: the same storage as
// SQ_TOKENS, one message per token.
const (
	rawTokStream  = "BENCH_RAWTOK"
	rawTokSubject = "benchraw.tok."
)

type tokensRun struct {
	cfg     Config
	lastErr string
	srv     *broker.Server
	op      *operator.Operator // the raw baseline's login on srv
	conns   []*nats.Conn
	cls     []*client.Client
}

func (tr *tokensRun) close() {
	for _, c := range tr.cls {
		c.Close()
	}
	for _, nc := range tr.conns {
		nc.Close()
	}
}

// client opens an SDK connection over loopback TCP, as a worker or the
// gateway's reader would have.
func (tr *tokensRun) client(ctx context.Context, name string) (*client.Client, error) {
	c, err := client.Connect(ctx, tr.srv.ClientURL(), client.WithName(name), client.WithTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	tr.cls = append(tr.cls, c)
	return c, nil
}

func (tr *tokensRun) rawConn() (*nats.Conn, error) {
	nc, err := tr.op.Connect(tr.srv.ClientURL(), nats.Name("bench-raw"))
	if err != nil {
		return nil, err
	}
	tr.conns = append(tr.conns, nc)
	return nc, nil
}

func (tr *tokensRun) rawStream(ctx context.Context) error {
	nc, err := tr.rawConn()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	js, _ := jetstream.New(nc)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: rawTokStream, Subjects: []string{rawTokSubject + ">"},
		Storage: jetstream.MemoryStorage, MaxAge: time.Hour, Duplicates: time.Second})
	if err != nil {
		return fmt.Errorf("bench: raw stream: %w", err)
	}
	return nil
}

// settle waits until SQ_TOKENS has no consumers and no records left.
func (tr *tokensRun) settle(ctx context.Context) error {
	nc, err := tr.rawConn()
	if err != nil {
		return err
	}
	js, _ := jetstream.New(nc)
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := js.Stream(ctx, semaq.TokenStream)
		if err != nil {
			return err
		}
		info := st.CachedInfo()
		if info.State.Consumers == 0 && info.State.Msgs == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			tr.cfg.progress("tokens: %s still has %d consumers and %d records; going on", semaq.TokenStream, info.State.Consumers, info.State.Msgs)
			return nil
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (tr *tokensRun) resetRaw(ctx context.Context) error {
	nc, err := tr.rawConn()
	if err != nil {
		return err
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteStream(ctx, rawTokStream); err != nil {
		return fmt.Errorf("bench: raw stream: %w", err)
	}
	return tr.rawStream(ctx)
}

// pool is a few connections shared round-robin by many streams, as the
// workers and readers of a real deployment spread over processes.
const poolSize = 4

// streams runs n concurrent streams of k tokens on both targets, the raw
// baseline first, and returns the comparison.
func (tr *tokensRun) streams(ctx context.Context, n, k int) (StreamRun, error) {
	run := StreamRun{Streams: n, Tokens: k}
	rawRate, err := tr.rawStreams(ctx, n, k)
	if err != nil {
		return run, fmt.Errorf("raw jetstream: %w", err)
	}
	// A fresh raw stream drops the baseline's consumers and messages, so
	// they cost the next phase nothing.
	if err := tr.resetRaw(ctx); err != nil {
		return run, err
	}
	rate, records, first, err := tr.semaqStreams(ctx, n, k)
	if err != nil {
		return run, fmt.Errorf("semaq: %w", err)
	}
	run.Semaq, run.Raw, run.Records, run.FirstToken = math.Round(rate), math.Round(rawRate), records, first
	run.Ratio = measure.Ratio(rate, rawRate)
	return run, nil
}

var benchToken = []string{" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy", " dog", "."}

func (tr *tokensRun) semaqStreams(ctx context.Context, n, k int) (float64, int64, measure.Latency, error) {
	var writers, readers []*client.Client
	for i := range poolSize {
		w, err := tr.client(ctx, "bench-tok-writer-"+strconv.Itoa(i))
		if err != nil {
			return 0, 0, measure.Latency{}, err
		}
		r, err := tr.client(ctx, "bench-tok-reader-"+strconv.Itoa(i))
		if err != nil {
			return 0, 0, measure.Latency{}, err
		}
		writers, readers = append(writers, w), append(readers, r)
	}
	prefix := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	rds := make([]*client.TokenReader, n)
	for i := range n {
		rd, err := readers[i%poolSize].ReadTokens(ctx, prefix+strconv.Itoa(i), client.WithGapTimeout(30*time.Second))
		if err != nil {
			return 0, 0, measure.Latency{}, err
		}
		defer rd.Close()
		rds[i] = rd
	}
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
		records  atomic.Int64
		mu       sync.Mutex
		firsts   = measure.NewHistogram()
		starts   = make([]time.Time, n)
		startsMu sync.Mutex
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel() // the other streams stop too
	}
	begin := time.Now()
	for i := range n {
		wg.Go(func() {
			rd := rds[i]
			var want uint64
			for {
				c, err := rd.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					fail(fmt.Errorf("stream %d: %w", i, err))
					return
				}
				records.Add(1)
				if c.Final != nil {
					continue
				}
				if c.Offset != want {
					fail(fmt.Errorf("stream %d: token %d came where %d was due", i, c.Offset, want))
					return
				}
				if want == 0 {
					startsMu.Lock()
					d := time.Since(starts[i])
					startsMu.Unlock()
					mu.Lock()
					firsts.Record(d)
					mu.Unlock()
				}
				want += uint64(c.N)
			}
			if want != uint64(k) {
				fail(fmt.Errorf("stream %d: %d tokens, want %d", i, want, k))
			}
		})
		wg.Go(func() {
			w, err := writers[i%poolSize].OpenTokenStream(ctx, prefix+strconv.Itoa(i), client.WithWriteWindow(tr.cfg.Window), client.WithRetention(time.Second))
			if err != nil {
				fail(err)
				return
			}
			startsMu.Lock()
			starts[i] = time.Now()
			startsMu.Unlock()
			for j := range k {
				if err := w.Write(ctx, benchToken[j%len(benchToken)]); err != nil {
					fail(err)
					return
				}
			}
			if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if firstErr != nil {
		return 0, 0, measure.Latency{}, firstErr
	}
	return float64(n*k) / elapsed.Seconds(), records.Load(), firsts.Summary(), nil
}

// rawStreams is the baseline: each token one JetStream message published
// asynchronously with the same window, read by an ordered consumer.
func (tr *tokensRun) rawStreams(ctx context.Context, n, k int) (float64, error) {
	var pubs []jetstream.JetStream
	var subs []jetstream.JetStream
	for range poolSize {
		p, err := tr.rawConn()
		if err != nil {
			return 0, err
		}
		s, err := tr.rawConn()
		if err != nil {
			return 0, err
		}
		pj, _ := jetstream.New(p, jetstream.WithPublishAsyncMaxPending(tr.cfg.Window))
		sj, _ := jetstream.New(s)
		pubs, subs = append(pubs, pj), append(subs, sj)
	}
	prefix := rawTokSubject + strconv.FormatInt(time.Now().UnixNano(), 36) + "."
	its := make([]jetstream.MessagesContext, n)
	for i := range n {
		cons, err := subs[i%poolSize].OrderedConsumer(ctx, rawTokStream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{prefix + strconv.Itoa(i)}, InactiveThreshold: 10 * time.Second})
		if err != nil {
			return 0, err
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(256))
		if err != nil {
			return 0, err
		}
		defer it.Stop()
		its[i] = it
	}
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		cancel() // the other streams stop too
	}
	begin := time.Now()
	for i := range n {
		wg.Go(func() {
			for j := 0; j <= k; j++ {
				m, err := its[i].Next(jetstream.NextContext(ctx))
				if err != nil {
					fail(err)
					return
				}
				if j == k && string(m.Data()) != "END" {
					fail(fmt.Errorf("raw stream %d: message %d is not the end", i, j))
					return
				}
			}
		})
		wg.Go(func() {
			js := pubs[i%poolSize]
			subj := prefix + strconv.Itoa(i)
			for j := range k {
				if err := publishRaw(js, subj, benchToken[j%len(benchToken)]); err != nil {
					fail(err)
					return
				}
			}
			if err := publishRaw(js, subj, "END"); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(n*k) / elapsed.Seconds(), nil
}

// publishRaw publishes asynchronously, waiting while the window is full
// as the token writer does.
func publishRaw(js jetstream.JetStream, subj, data string) error {
	for {
		_, err := js.PublishAsync(subj, []byte(data), jetstream.WithStallWait(time.Second))
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
	}
}

// gateway measures the time to first token at the configured rate, with
// the direct calls and the gateway calls in alternating halves.
func (tr *tokensRun) gateway(ctx context.Context) (GatewayRun, error) {
	run := GatewayRun{Rate: tr.cfg.Rate}
	simCfg := sim.Config{Tokens: tr.cfg.AnswerTokens}
	m, err := sim.New(simCfg)
	if err != nil {
		return run, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return run, err
	}
	direct := &http.Server{Handler: sim.Handler(m, "bench-sim"), ReadHeaderTimeout: 10 * time.Second}
	go direct.Serve(ln)
	defer direct.Close()

	wc, err := tr.client(ctx, "bench-worker")
	if err != nil {
		return run, err
	}
	w, err := worker.New(wc, worker.Config{Upstream: "sim", Models: []string{"bench-sim"}, Concurrency: 256, Sim: simCfg})
	if err != nil {
		return run, err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	ready := make(chan struct{})
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.RunReady(wctx, func() { close(ready) }) }()
	defer func() { stopWorker(); <-workerDone }()
	select {
	case <-ready:
	case err := <-workerDone:
		return run, fmt.Errorf("worker: %w", err)
	}

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}}
	defer hc.CloseIdleConnections()
	urls := map[string]string{
		"direct":  "http://" + ln.Addr().String() + "/v1/chat/completions",
		"gateway": "http://" + tr.srv.HTTPAddr() + "/v1/chat/completions",
	}
	hists := map[string]*measure.Histogram{"direct": measure.NewHistogram(), "gateway": measure.NewHistogram()}
	// Warm both paths (connections, consumers, caches) unmeasured.
	for _, target := range []string{"direct", "gateway"} {
		if _, _, err := tr.pace(ctx, hc, urls[target], min(tr.cfg.Rate, 200), time.Second, measure.NewHistogram()); err != nil {
			return run, fmt.Errorf("%s warm-up: %w", target, err)
		}
	}
	for round := range 2 {
		for _, target := range []string{"direct", "gateway"} {
			if round == 1 {
				target = map[string]string{"direct": "gateway", "gateway": "direct"}[target]
			}
			n, errs, err := tr.pace(ctx, hc, urls[target], tr.cfg.Rate, tr.cfg.Duration/2, hists[target])
			if err != nil {
				return run, fmt.Errorf("%s: %w", target, err)
			}
			if target == "gateway" {
				run.Requests += n
				run.Errors += errs
			}
		}
	}
	run.LastError = tr.lastErr
	run.Direct, run.Gateway = hists["direct"].Summary(), hists["gateway"].Summary()
	run.Overhead = run.Gateway.Sub(run.Direct)
	return run, nil
}

// pace sends streamed completions at rate for d (open loop: each request
// at its scheduled time, on its own goroutine) and records each one's
// time to first content token, measured from its scheduled time.
func (tr *tokensRun) pace(ctx context.Context, hc *http.Client, url string, rate float64, d time.Duration, h *measure.Histogram) (int64, int64, error) {
	body := []byte(`{"model":"bench-sim","stream":true,"messages":[{"role":"user","content":"benchmark the first token"}]}`)
	total := int64(rate * d.Seconds())
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs atomic.Int64
		last atomic.Value
	)
	start := time.Now()
	for i := range total {
		due := start.Add(time.Duration(float64(i) / rate * 1e9))
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
		wg.Go(func() {
			at, err := firstToken(ctx, hc, url, body)
			if err != nil {
				errs.Add(1)
				last.Store(err)
				return
			}
			mu.Lock()
			h.Record(at.Sub(due))
			mu.Unlock()
		})
	}
	wg.Wait()
	if e := errs.Load(); e == total && total > 0 {
		return total, e, fmt.Errorf("every request failed: %v", last.Load())
	}
	if err, ok := last.Load().(error); ok {
		tr.lastErr = err.Error()
	}
	return total, errs.Load(), nil
}

// firstToken sends one streamed request and returns when its first
// content token arrived; it reads the rest of the answer to the end.
func firstToken(ctx context.Context, hc *http.Client, url string, body []byte) (time.Time, error) {
	var at time.Time
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return at, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return at, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	r := sse.NewReader(resp.Body, 0)
	for {
		ev, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) && !at.IsZero() {
				return at, nil
			}
			return time.Time{}, fmt.Errorf("stream ended early: %v", err)
		}
		if ev.Data == "[DONE]" {
			if at.IsZero() {
				return at, errors.New("no content token")
			}
			_, _ = io.Copy(io.Discard, resp.Body) // to the end, so the connection is reused
			return at, nil
		}
		if at.IsZero() {
			var c openai.ChatCompletionChunk
			if json.Unmarshal([]byte(ev.Data), &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
				at = time.Now()
			}
		}
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	yes := func(b bool) string {
		if b {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(tw, "token streams (%s, %d CPUs, nats-server %s)\n", r.Env.Platform, r.Env.CPUs, r.Env.NATSServer)
	fmt.Fprintf(tw, "phase\tstreams x tokens\tsemaq tok/s\tjetstream tok/s\tratio\trecords\tfirst token p50/p99 µs\n")
	for _, s := range []struct {
		name string
		run  StreamRun
	}{{"one stream", r.Single}, {"concurrent", r.Many}} {
		fmt.Fprintf(tw, "%s\t%d x %d\t%.0f\t%.0f\t%.2f\t%d\t%.0f / %.0f\n", s.name, s.run.Streams, s.run.Tokens,
			s.run.Semaq, s.run.Raw, s.run.Ratio, s.run.Records, s.run.FirstToken.P50, s.run.FirstToken.P99)
	}
	g := r.Gateway
	fmt.Fprintf(tw, "\ngateway TTFT at %g req/s (%d requests, %d errors)\tp50 µs\tp90 µs\tp99 µs\tmax µs\n", g.Rate, g.Requests, g.Errors)
	for _, l := range []struct {
		name string
		lat  measure.Latency
	}{{"sim directly", g.Direct}, {"through the gateway", g.Gateway}, {"overhead", g.Overhead}} {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.0f\n", l.name, l.lat.P50, l.lat.P90, l.lat.P99, l.lat.Max)
	}
	if g.LastError != "" {
		fmt.Fprintf(tw, "last error: %s\n", g.LastError)
	}
	fmt.Fprintf(tw, "\ngoals\tone stream >= %d tok/s: %s\tgateway overhead p50 <= %.0f µs: %s\tp99 <= %.0f µs: %s\n",
		GoalSingleStreamTokensPerS, yes(r.Goals.SingleStream), GoalGatewayP50US, yes(r.Goals.GatewayP50), GoalGatewayP99US, yes(r.Goals.GatewayP99))
	return tw.Flush()
}
