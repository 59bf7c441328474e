// Package worker is the worker adapter behind `semaq worker`: it takes
// inference requests from the queues of its models, calls an
// OpenAI-compatible upstream (vLLM, Ollama, llama.cpp server, a hosted
// API) or the built-in simulated model, and streams the upstream's tokens
// into the request's token stream. See docs/worker.md.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker/upstream"
	"github.com/semaq/semaq/semaq"
)

// Config configures a worker. Start from the zero value and set Upstream
// and Models; Validate fills the defaults.
type Config struct {
	// Upstream is the base URL of an OpenAI-compatible API
	// (http://host:8000/v1), or "sim" for the built-in simulated model.
	Upstream string
	// Models are the model names the worker serves; at least one.
	Models []string
	// Version is the model version it serves (docs/models.md): it takes
	// the requests the model registry bound to that version, and no other
	// bound request. Empty: only requests no registry bound.
	Version string
	// Concurrency is how many requests run at once (default 4).
	Concurrency int
	// APIKey is sent to the upstream as a bearer token.
	APIKey string
	// Labels describe the worker to the dispatcher; "adapter" lists the
	// adapters it has loaded (comma-separated) and draws their requests.
	Labels map[string]string
	// Sim configures the simulated model of Upstream "sim".
	Sim sim.Config
	// ID names the worker in the agent registry (default worker-<random>).
	ID string
	// AckWait is the ack wait of the queues the worker creates (default
	// 10s): a worker that dies holding a request loses it after this.
	AckWait time.Duration
	// AnnounceTTL is how long the worker's announcement in the agent
	// registry holds without a heartbeat (default 10s): a worker that dies
	// leaves the registry, and GET /v1/models, after it.
	AnnounceTTL time.Duration
	// QueueStorage is the storage of the queues the worker creates:
	// memory (default) or file.
	QueueStorage string
	// HealthInterval is how often the worker asks an HTTP upstream
	// GET /models (default 5s): while it does not answer, the worker's
	// models are withdrawn from the agent registry (GET /v1/models, the
	// gateway's 404) and it fetches nothing.
	HealthInterval time.Duration
	// Log receives what the worker does; nil discards it.
	Log *slog.Logger
	// HTTPClient calls the upstream; nil means a default client.
	HTTPClient *http.Client
}

// Validate checks c and fills its defaults.
func (c *Config) Validate() error {
	if c.Upstream == "" {
		return errors.New("worker: --upstream is required (a URL such as http://127.0.0.1:8000/v1, or sim)")
	}
	if c.Upstream != "sim" {
		if _, err := newHTTPUpstream(c.Upstream, "", nil); err != nil {
			return err
		}
	}
	if c.Version != "" {
		if err := semaq.CheckModelVersion(c.Version); err != nil {
			return fmt.Errorf("worker: --version: %w", err)
		}
	}
	if len(c.Models) == 0 {
		return errors.New("worker: at least one --model is required")
	}
	seen := map[string]bool{}
	for _, m := range c.Models {
		if err := semaq.CheckModel(m); err != nil {
			return fmt.Errorf("worker: --model: %w", err)
		}
		if seen[m] {
			return fmt.Errorf("worker: --model %s given twice", m)
		}
		seen[m] = true
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Concurrency < 1 || c.Concurrency > 4096 {
		return fmt.Errorf("worker: --concurrency %d is outside 1..4096", c.Concurrency)
	}
	if c.ID == "" {
		c.ID = "worker-" + nuid.Next()
	}
	if err := semaq.CheckAgentID(c.ID); err != nil {
		return fmt.Errorf("worker: id: %w", err)
	}
	if c.AckWait == 0 {
		c.AckWait = 10 * time.Second
	}
	if c.AckWait < 100*time.Millisecond {
		return fmt.Errorf("worker: ack wait %s is under 100ms", c.AckWait)
	}
	if c.AnnounceTTL == 0 {
		c.AnnounceTTL = 10 * time.Second
	}
	if c.AnnounceTTL < semaq.MinAgentTTL || c.AnnounceTTL > semaq.MaxAgentTTL {
		return fmt.Errorf("worker: announce ttl %s is outside %s..%s", c.AnnounceTTL, semaq.MinAgentTTL, semaq.MaxAgentTTL)
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = 5 * time.Second
	}
	if c.HealthInterval < 10*time.Millisecond {
		return fmt.Errorf("worker: health interval %s is under 10ms", c.HealthInterval)
	}
	switch c.QueueStorage {
	case "":
		c.QueueStorage = "memory"
	case "memory", "file":
	default:
		return fmt.Errorf("worker: queue storage %q is not memory or file", c.QueueStorage)
	}
	for k := range c.Labels {
		if k == "" || k == "model" || k == "version" {
			return fmt.Errorf("worker: --label %q: the model and version labels come from --model and --version", k)
		}
	}
	return c.Sim.Validate()
}

// Stats count what a worker did.
type Stats struct {
	Jobs      uint64 // requests answered completely
	Cancelled uint64 // requests whose context ended while running
	Failed    uint64 // upstream failures
	Lost      uint64 // requests found half-streamed by a worker that died
	Tokens    uint64 // tokens streamed
	InFlight  int64  // requests running now
}

// Worker serves inference requests. Run it once.
type Worker struct {
	c        *client.Client
	cfg      Config
	up       Upstream
	upstream string // cfg.Upstream without its password, for logs
	log      *slog.Logger
	queues   map[string]*modelQueue // by model
	fatal    context.CancelCauseFunc

	// annMu guards ann: the announcement while the upstream answers,
	// nil while it does not (health.go).
	annMu sync.Mutex
	ann   *client.Announcement
	down  atomic.Bool // the upstream does not answer: fetch nothing

	inFlight                              atomic.Int64
	jobs, cancelled, failed, lost, tokens atomic.Uint64
}

// New prepares a worker that talks to the broker through c.
func New(c *client.Client, cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Worker{c: c, cfg: cfg, log: cfg.Log, upstream: RedactURL(cfg.Upstream), queues: map[string]*modelQueue{}}
	for _, m := range cfg.Models {
		w.queues[m] = &modelQueue{model: m, subject: semaq.InferSubject(m), name: semaq.InferQueue(m)}
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Upstream == "sim" {
		m, err := sim.New(cfg.Sim)
		if err != nil {
			return nil, err
		}
		w.up = m
	} else {
		up, err := newHTTPUpstream(cfg.Upstream, cfg.APIKey, cfg.HTTPClient)
		if err != nil {
			return nil, err
		}
		w.up = up
	}
	return w, nil
}

// ID is the worker's id in the agent registry.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	return Stats{Jobs: w.jobs.Load(), Cancelled: w.cancelled.Load(), Failed: w.failed.Load(), Lost: w.lost.Load(), Tokens: w.tokens.Load(),
		InFlight: w.inFlight.Load()}
}

// Run creates the queues of the worker's models, announces the worker and
// serves requests until ctx ends. Requests in progress then run to their
// end (each is bounded by its own deadline) before Run returns.
func (w *Worker) Run(ctx context.Context) error { return w.run(ctx, nil) }

// RunReady is Run calling ready once the worker's queues exist and it is
// announced: requests for its models are accepted from then on.
func (w *Worker) RunReady(ctx context.Context, ready func()) error { return w.run(ctx, ready) }

func (w *Worker) run(parent context.Context, ready func()) error {
	// A queue the worker cannot recreate ends it (fatal), with that error.
	ctx, fatal := context.WithCancelCause(parent)
	defer fatal(nil)
	w.fatal = fatal
	// An upstream that does not answer would make every request a 502:
	// better not to start, saying which.
	if err := w.checkUpstream(ctx); err != nil {
		return err
	}
	for _, m := range w.cfg.Models {
		if err := w.addQueue(ctx, w.queues[m]); err != nil {
			return err
		}
	}
	if err := w.announce(ctx); err != nil {
		return err
	}
	w.log.Info("worker serving", "id", w.cfg.ID, "models", w.cfg.Models, "upstream", w.upstream, "concurrency", w.cfg.Concurrency)
	if ready != nil {
		ready()
	}
	var health sync.WaitGroup
	health.Go(func() { w.watchUpstream(ctx) })

	slots := make(chan struct{}, w.cfg.Concurrency)
	// Fetches under way when the worker stops are not given up on at once:
	// the broker may have handed them jobs already, and an abandoned fetch
	// would lose those until their ack wait. fetchCtx ends fetchGrace
	// after ctx, time for a fetch's wait and its answer.
	fetchCtx, cancelFetch := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFetch()
	stopFetches := context.AfterFunc(ctx, func() { time.AfterFunc(fetchGrace, cancelFetch) })
	defer stopFetches()
	var running sync.WaitGroup
	var fetchers sync.WaitGroup
	for _, m := range w.cfg.Models {
		labels := maps.Clone(w.cfg.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels["model"] = m
		if w.cfg.Version != "" {
			labels["version"] = w.cfg.Version
		}
		// Several fetches wait at once, so a request finds one already
		// waiting even while another fetch's answer is on its way back.
		for range min(w.cfg.Concurrency, fetchersPerModel) {
			fetchers.Go(func() { w.fetchLoop(ctx, fetchCtx, w.queues[m], labels, slots, &running) })
		}
	}
	fetched := make(chan struct{})
	go func() {
		fetchers.Wait()
		close(fetched)
	}()
	select {
	case <-ctx.Done():
	case <-fetched:
	}
	stopping := []any{"in_flight", w.inFlight.Load()}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		stopping = append(stopping, "err", err)
	}
	w.log.Info("worker stopping", stopping...)
	<-fetched // the fetches under way end within their wait; their jobs run
	health.Wait()
	running.Wait()
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.withdraw(lctx)
	w.log.Info("worker stopped", "id", w.cfg.ID, "jobs", w.jobs.Load())
	if parent.Err() == nil {
		if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}

// fetchWait is how long one fetch waits for jobs; fetchGrace is how long
// a fetch under way may finish once the worker stops.
const (
	fetchWait  = time.Second
	fetchGrace = fetchWait + 500*time.Millisecond
)

// fetchersPerModel is how many fetches a worker keeps open per model.
const fetchersPerModel = 4

// fetchLoop fetches jobs for q while there are free slots, until ctx
// ends. A fetch asks for as many jobs as slots it could take. A queue
// that is gone is recreated; failures back off from 100ms to 5s.
func (w *Worker) fetchLoop(ctx, fetchCtx context.Context, q *modelQueue, labels map[string]string, slots chan struct{}, running *sync.WaitGroup) {
	backoff := time.Duration(0)
	for {
		if w.down.Load() {
			// The upstream does not answer: a request taken now would
			// fail; leave it to the model's other workers.
			select {
			case <-time.After(w.cfg.HealthInterval):
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	more:
		for n < 16 {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		// A short wait lets the fetchers of several models take turns with
		// the slots.
		// The subject filter keeps the fetch to this model's requests on
		// a queue shared by several models.
		queue := q.queue()
		// fetchCtx, not ctx: a fetch under way when the worker stops still
		// brings the jobs handed to it, and they run.
		jobs, err := w.c.Fetch(fetchCtx, queue, client.FetchMax(n), client.FetchWait(fetchWait), client.FetchLabels(labels),
			client.FetchSubject(q.subject))
		for range n - len(jobs) {
			<-slots
		}
		for _, job := range jobs {
			w.inFlight.Add(1)
			running.Go(func() {
				defer func() { <-slots }()
				defer w.inFlight.Add(-1)
				w.handle(job, q)
			})
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			backoff = 0
			q.recovered(w.log)
			continue
		case errors.Is(err, semaq.ErrQueueNotFound):
			// Lost in a broker restart (a memory queue) or deleted:
			// recreate it, once for all the model's fetchers.
			if rerr := w.recreate(ctx, q); rerr != nil {
				if permanent(rerr) {
					w.log.Error("stopping: cannot recreate a queue", "queue", queue, "err", rerr)
					w.fatal(rerr)
					return
				}
				q.failed(w.log, rerr)
			}
			// Even when it is back, wait a little: a queue that exists
			// but whose fetches still fail must not be asked in a loop.
		default:
			q.failed(w.log, err)
		}
		backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
	}
}

// handle runs one request from the queue to the end of its token stream.
func (w *Worker) handle(job *client.Job, q *modelQueue) {
	ctx := job.Context()
	// Answers to the broker outlive the job's context: a cancelled job
	// still gets its stream ended.
	bg, cancelBg := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancelBg()
	id := job.ID
	if err := semaq.CheckRequestID(id); err != nil {
		_ = job.Term(bg, "request id: "+err.Error())
		return
	}
	log := w.log.With("request", id, "queue", job.Queue)
	req, err := openai.ParseChatRequest(job.Data)
	if err == nil {
		err = checkModel(job, req, q)
	}
	if err != nil {
		if aerr := job.AbortTokenStream(bg, &semaq.TokenError{Code: "bad_request", Message: err.Error()}); aerr != nil {
			log.Warn("ending the token stream of a refused request", "err", aerr)
		}
		_ = job.Term(bg, "bad request: "+err.Error())
		log.Warn("refused a request", "err", err)
		return
	}
	if job.Deliveries > 1 {
		// A worker had it before and died or lost its lease. If it
		// streamed nothing, start afresh; otherwise the output so far
		// cannot be continued (another run of a model writes other
		// words), so end the stream with a clear error.
		// How far its stream got, from the broker's status API (a
		// worker may ask it of any tenant's stream, not read it).
		st, err := w.c.TokenStatus(bg, id)
		if err != nil {
			log.Warn("asking how far the token stream of a redelivered request got", "err", err)
			_ = job.Nak(bg, time.Second)
			return
		}
		if st.Ended && st.Final {
			_ = job.Ack(bg) // answered in full; only the ack was lost
			return
		}
		if st.Records > 0 {
			if !st.Ended {
				w.lost.Add(1)
				log.Warn("request redelivered after partial output; ending its stream", "tokens", st.Offset)
				_ = job.AbortTokenStream(bg, &semaq.TokenError{Code: semaq.TokenErrWorkerLost,
					Message: fmt.Sprintf("the worker serving this request stopped after %d tokens; retry the request", st.Offset)})
			}
			_ = job.Term(bg, semaq.TokenErrWorkerLost)
			return
		}
	}
	tw, err := job.OpenTokenStream(bg, // keyed by the job's lease: the broker takes its records from this worker only
		client.WithStreamTraceParent(job.Header.Get(semaq.HdrTraceParent)),
		client.WithStreamSession(job.Header.Get(semaq.HdrSession)),
		client.WithStreamRequest(job.Header)) // labels and timing for the broker's metrics
	if err != nil {
		_ = job.Term(bg, err.Error())
		return
	}

	// Heartbeats keep the lease while the upstream works.
	ackWait, _ := time.ParseDuration(job.Header.Get(semaq.HdrQueueAckWait))
	if ackWait <= 0 {
		ackWait = w.cfg.AckWait
	}
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go func() {
		defer close(hbStopped)
		t := time.NewTicker(ackWait / 3)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := job.InProgress(ctx); err != nil && ctx.Err() == nil {
					log.Warn("extending the lease", "err", err)
				}
			case <-hbDone:
				return
			case <-ctx.Done():
				return
			}
		}
	}()

	var n uint64
	out, err := w.up.Chat(ctx, job.Data, req, func(p upstream.Piece) error {
		n++
		if p.Func != nil {
			return tw.WriteFunctionCall(ctx, *p.Func)
		}
		return tw.Write(ctx, p.Text)
	})
	close(hbDone)
	<-hbStopped
	w.tokens.Add(n)
	switch {
	case err == nil:
		u := out.Usage
		if cerr := tw.Close(bg, semaq.TokenFinal{FinishReason: out.FinishReason, Usage: &u}); cerr != nil {
			log.Warn("closing the token stream", "err", cerr)
		}
		if aerr := retryAnswer(bg, time.Now().Add(ackWait), func(ctx context.Context) error {
			return job.Ack(ctx, client.AckOutputTokens(int64(u.Completion)))
		}); aerr != nil {
			log.Warn("acking", "err", aerr)
		}
		w.jobs.Add(1)
	case ctx.Err() != nil:
		w.cancelled.Add(1)
		te := &semaq.TokenError{Code: semaq.TokenErrCancelled, Message: "the request was cancelled"}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			te = &semaq.TokenError{Code: semaq.TokenErrDeadline, Message: "the request's deadline passed"}
		} else if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			te.Message = c.Error()
		}
		_ = tw.Abort(bg, te)
		_ = job.Term(bg, te.Code) // refused when the job is already gone; that is fine
		log.Debug("request ended early", "reason", te.Code)
	default:
		w.failed.Add(1)
		// The client reads what the upstream is allowed to tell it; the
		// details, which name internal hosts, stay in the worker's log.
		public := PublicMessage(err)
		_ = tw.Abort(bg, &semaq.TokenError{Code: semaq.TokenErrUpstream, Message: public})
		_ = job.Term(bg, public)
		log.Warn("upstream failed", "upstream", w.upstream, "err", err)
	}
}

// checkModel refuses a request whose model is not the one it was fetched
// for: the body, the AI-Model header and the subject must agree, so what is
// sent to the upstream (with the operator's key) is what was queued and
// accounted. The gateway's parser already refuses bodies it would read
// differently from the upstream; this holds for anything published
// straight onto the queue too.
func checkModel(job *client.Job, req *openai.ChatRequest, q *modelQueue) error {
	if job.Subject != q.subject {
		return fmt.Errorf("the request was published on %s, not on %s", job.Subject, q.subject)
	}
	if req.Model != q.model {
		return fmt.Errorf("the request is for model %q but was queued for %q", req.Model, q.model)
	}
	if h := job.Header.Values(semaq.HdrModel); len(h) > 1 || (len(h) == 1 && h[0] != q.model) {
		return fmt.Errorf("the request's %s header %q does not name the model %q", semaq.HdrModel, h, q.model)
	}
	return nil
}
