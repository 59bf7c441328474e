// Package sessions is `semaq bench sessions`: session state kept by the
// broker, measured against the same state kept in a plain JetStream KV
// bucket, on one embedded broker in the same run. One operation is a pair:
// a small JSON merge patch of a session's data, then a read of the
// session. Through the SDK that is PatchSession then GetSession; with KV
// alone a client reads the value, applies the patch itself, writes it back
// with compare-and-set on the revision it read, then reads it again. The
// targets alternate in rounds, each round's latencies go in an HDR
// histogram, and the report gives each round's figures and their medians.
// Like bench/tokens it writes a report of its own and shares with the
// other benchmarks only their histograms (bench/measure).
package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Target names, as the report gives them.
const (
	// TargetSemaq patches and reads sessions through the SDK.
	TargetSemaq = "semaq"
	// TargetKV does the same on a JetStream KV bucket stored like the
	// broker's session store, from a client that has nothing but NATS KV.
	TargetKV = "jetstream-kv"
)

// GoalP50Ratio is the goal: a pair's median latency through the SDK at
// most this many times the KV pair's.
const GoalP50Ratio = 1.5

// Bounds of a run, so a typo cannot start an hour-long run or fill the
// store.
const (
	MaxSessions = 10_000
	MaxClients  = 64
	MaxRounds   = 100
	MaxDuration = time.Hour
	MinSize     = 32
	MaxSize     = 64 << 10
)

// Config configures `semaq bench sessions`. Start from DefaultConfig.
type Config struct {
	// Sessions each client patches and reads, round-robin.
	Sessions int `json:"sessions"`
	// Clients run pairs concurrently, each on connections of its own and
	// on sessions of its own; 1 measures latency without contention.
	Clients int `json:"clients"`
	// Size is the merge patch's size in bytes.
	Size int `json:"patch_bytes"`
	// Duration is each target's measured time, cut into Rounds slices run
	// in alternating target order; Warmup is each target's unmeasured time
	// before the first round.
	Duration time.Duration `json:"duration"`
	Warmup   time.Duration `json:"warmup"`
	Rounds   int           `json:"rounds"`
	// Dir is the broker's data directory, empty or new; empty means a
	// temporary one.
	Dir string `json:"-"`
	// Progress receives progress lines; nil discards them.
	Progress io.Writer `json:"-"`
}

// DefaultConfig is what `semaq bench sessions` runs without flags.
func DefaultConfig() Config {
	return Config{Sessions: 16, Clients: 1, Size: 200, Duration: 5 * time.Second, Warmup: time.Second, Rounds: 5}
}

// Validate reports the first setting out of range, naming its flag.
func (c *Config) Validate() error {
	switch {
	case c.Sessions < 1 || c.Sessions > MaxSessions:
		return fmt.Errorf("--sessions %d is outside 1..%d", c.Sessions, MaxSessions)
	case c.Clients < 1 || c.Clients > MaxClients:
		return fmt.Errorf("--clients %d is outside 1..%d", c.Clients, MaxClients)
	case c.Sessions*c.Clients > MaxSessions:
		return fmt.Errorf("--sessions %d × --clients %d is %d sessions; at most %d", c.Sessions, c.Clients, c.Sessions*c.Clients, MaxSessions)
	case c.Size < MinSize || c.Size > MaxSize:
		return fmt.Errorf("--size %d is outside %d..%d bytes", c.Size, MinSize, MaxSize)
	case c.Rounds < 1 || c.Rounds > MaxRounds:
		return fmt.Errorf("--rounds %d is outside 1..%d", c.Rounds, MaxRounds)
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("--duration %s is outside (0, %s]", c.Duration, MaxDuration)
	case c.Duration/time.Duration(c.Rounds) < time.Millisecond:
		return fmt.Errorf("--duration %s over --rounds %d leaves rounds under 1ms", c.Duration, c.Rounds)
	case c.Warmup < 0 || c.Warmup > MaxDuration:
		return fmt.Errorf("--warmup %s is outside [0, %s]", c.Warmup, MaxDuration)
	}
	return nil
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// kvBucket is the baseline's bucket.
const kvBucket = "BENCH_SESSIONS"

// Run measures both targets on an embedded broker and reports them.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "semaq-bench-sessions-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := bench.CheckEmptyDir(dir); err != nil {
		return nil, err
	}
	bc := broker.DefaultConfig()
	bc.DataDir = filepath.Join(dir, "semaq")
	bc.Listen = "127.0.0.1:0"
	bc.HTTP = ""
	bc.LogLevel = "error"
	op, err := operator.New()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	srv, err := broker.New(bc, nil, op.Option())
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cfg.progress("sessions: starting broker (data %s)", dir)
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	r := &sessionsRun{cfg: cfg, srv: srv, op: op}
	defer r.close()
	if err := r.open(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rep := &Report{Scenario: "sessions", Config: cfg, Store: r.store, Env: Env{
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), NATSServer: server.VERSION, SemaQ: broker.Version,
	}, Goal: Goal{P50Ratio: GoalP50Ratio}}
	results := map[string]*Result{TargetSemaq: {Target: TargetSemaq}, TargetKV: {Target: TargetKV}}
	all := map[string]*measure.Histogram{TargetSemaq: measure.NewHistogram(), TargetKV: measure.NewHistogram()}

	if cfg.Warmup > 0 {
		for _, t := range []string{TargetSemaq, TargetKV} {
			cfg.progress("sessions: warming up %s (%s)", t, cfg.Warmup)
			if _, err := r.slice(ctx, t, cfg.Warmup); err != nil {
				return nil, fmt.Errorf("bench: %s: warm-up: %w", t, err)
			}
		}
	}
	slice := cfg.Duration / time.Duration(cfg.Rounds)
	for round := range cfg.Rounds {
		order := []string{TargetSemaq, TargetKV}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, t := range order {
			cfg.progress("sessions %s: round %d/%d, %s, %d client(s)", t, round+1, cfg.Rounds, slice, cfg.Clients)
			s, err := r.slice(ctx, t, slice)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: %w", t, err)
			}
			results[t].ByRound = append(results[t].ByRound, s.figures())
			results[t].Pairs += s.pairs
			all[t].Merge(s.hist)
		}
		rep.Ratio.ByRound = append(rep.Ratio.ByRound, RoundRatio{
			P50: measure.Ratio(results[TargetSemaq].ByRound[round].P50, results[TargetKV].ByRound[round].P50),
			P99: measure.Ratio(results[TargetSemaq].ByRound[round].P99, results[TargetKV].ByRound[round].P99),
		})
	}
	cfg.progress("sessions: checking every session's last write")
	if err := r.check(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	for _, t := range []string{TargetSemaq, TargetKV} {
		res := results[t]
		res.Median = medianOf(res.ByRound)
		res.AllRounds = all[t].Summary()
		rep.Results = append(rep.Results, *res)
	}
	var p50s, p99s []float64
	for _, rr := range rep.Ratio.ByRound {
		p50s, p99s = append(p50s, rr.P50), append(p99s, rr.P99)
	}
	rep.Ratio.P50, rep.Ratio.P99 = measure.Median(p50s), measure.Median(p99s)
	rep.Goal.Met = rep.Ratio.P50 > 0 && rep.Ratio.P50 <= GoalP50Ratio
	return rep, nil
}

// sessionsRun is one run's connections and sessions.
type sessionsRun struct {
	cfg     Config
	srv     *broker.Server
	op      *operator.Operator // the baseline's login: only it may reach JetStream below the semantic layer
	store   Store
	workers []*worker
}

// worker is one client: a connection per target and sessions of its own,
// so no two workers ever write the same session or key.
type worker struct {
	ids   []string
	paths map[string]path
	// next is the index of the next session per target; turns the turn
	// last written to each session per target, checked at the end.
	next  map[string]int
	turns map[string][]int
}

// path is one target's way to do a pair.
type path interface {
	// create makes the session with doc as its data.
	create(ctx context.Context, id string, doc []byte) error
	// pair patches the session's data and reads the session.
	pair(ctx context.Context, id string, patch []byte) error
	// data reads the session's data.
	data(ctx context.Context, id string) ([]byte, error)
	close()
}

// initialDoc is every session's data before the first patch: the turn the
// patches overwrite, and fields they leave alone.
var initialDoc = []byte(`{"user":"bench","model":"sim-1","locale":"en","turn":0,"summary":""}`)

func (r *sessionsRun) open(ctx context.Context) error {
	nc, err := r.op.Connect(r.srv.ClientURL(), nats.Name("semaq-bench-sessions-setup"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The baseline's bucket is stored as the session store is, whatever
	// this broker's settings make of it.
	st, err := js.Stream(ctx, reserved.SessionStream)
	if err != nil {
		return fmt.Errorf("the session store %s: %w", reserved.SessionStream, err)
	}
	sc := st.CachedInfo().Config
	r.store = Store{Bucket: kvBucket, Storage: strings.ToLower(sc.Storage.String()), Replicas: sc.Replicas}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: kvBucket, Storage: sc.Storage, Replicas: sc.Replicas,
	}); err != nil {
		return fmt.Errorf("%s bucket: %w", TargetKV, err)
	}
	prefix := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	for i := range r.cfg.Clients {
		w := &worker{paths: map[string]path{}, next: map[string]int{}, turns: map[string][]int{}}
		r.workers = append(r.workers, w)
		for j := range r.cfg.Sessions {
			w.ids = append(w.ids, prefix+strconv.Itoa(i)+"-"+strconv.Itoa(j))
		}
		name := "semaq-bench-sessions-" + strconv.Itoa(i)
		// A SemaQ client connects as any user does; the KV client as the
		// operator, the only login that may use a bucket of its own here.
		c, err := client.Connect(ctx, r.srv.ClientURL(), client.WithName(name), client.WithTimeout(30*time.Second))
		if err != nil {
			return err
		}
		w.paths[TargetSemaq] = &semaqPath{c: c}
		knc, err := r.op.Connect(r.srv.ClientURL(), nats.Name(name+"-kv"))
		if err != nil {
			return err
		}
		kjs, err := jetstream.New(knc)
		if err != nil {
			knc.Close()
			return err
		}
		kv, err := kjs.KeyValue(ctx, kvBucket)
		if err != nil {
			knc.Close()
			return err
		}
		w.paths[TargetKV] = &kvPath{nc: knc, kv: kv}
		for t, p := range w.paths {
			w.turns[t] = make([]int, len(w.ids))
			for _, id := range w.ids {
				if err := p.create(ctx, id, initialDoc); err != nil {
					return fmt.Errorf("%s: creating session %s: %w", t, id, err)
				}
			}
		}
	}
	return nil
}

func (r *sessionsRun) close() {
	for _, w := range r.workers {
		for _, p := range w.paths {
			p.close()
		}
	}
}

// sliceResult is what the workers did on one target in one slice.
type sliceResult struct {
	hist    *measure.Histogram
	pairs   int64
	elapsed time.Duration
}

func (s sliceResult) figures() Figures {
	l := s.hist.Summary()
	return Figures{P50: l.P50, P90: l.P90, P99: l.P99, OpsPerS: measure.Round1(float64(s.pairs) / s.elapsed.Seconds()), Pairs: s.pairs}
}

// slice runs pairs on target t from every worker for d; each worker ends
// its pair in progress at d, so a slice has at least one pair a worker.
func (r *sessionsRun) slice(ctx context.Context, t string, d time.Duration) (sliceResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		res   = sliceResult{hist: measure.NewHistogram()}
		first error
	)
	start := time.Now()
	end := start.Add(d)
	for _, w := range r.workers {
		wg.Go(func() {
			h := measure.NewHistogram()
			n, err := w.run(ctx, t, end, r.cfg.Size, h)
			mu.Lock()
			defer mu.Unlock()
			res.hist.Merge(h)
			res.pairs += n
			if err != nil && first == nil {
				first = err
				cancel() // the other workers stop too
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res, first
}

// run does pairs on target t until end and records each one's latency.
func (w *worker) run(ctx context.Context, t string, end time.Time, size int, h *measure.Histogram) (int64, error) {
	p, turns := w.paths[t], w.turns[t]
	var n int64
	for {
		i := w.next[t] % len(w.ids)
		turn := turns[i] + 1
		patch := buildPatch(turn, size)
		begin := time.Now()
		if err := p.pair(ctx, w.ids[i], patch); err != nil {
			return n, fmt.Errorf("session %s, turn %d: %w", w.ids[i], turn, err)
		}
		now := time.Now()
		h.Record(now.Sub(begin))
		turns[i], w.next[t], n = turn, w.next[t]+1, n+1
		if !now.Before(end) {
			return n, nil
		}
	}
}

// check reads every session of both targets once more: each must hold the
// turn its last patch wrote and the fields no patch touched.
func (r *sessionsRun) check(ctx context.Context) error {
	for _, w := range r.workers {
		for t, p := range w.paths {
			for i, id := range w.ids {
				b, err := p.data(ctx, id)
				if err != nil {
					return fmt.Errorf("%s: reading session %s: %w", t, id, err)
				}
				var doc struct {
					Turn  int    `json:"turn"`
					Model string `json:"model"`
				}
				if err := json.Unmarshal(b, &doc); err != nil {
					return fmt.Errorf("%s: session %s: %w", t, id, err)
				}
				if doc.Turn != w.turns[t][i] || doc.Model != "sim-1" {
					return fmt.Errorf("%s: session %s holds turn %d of model %q, want turn %d of sim-1", t, id, doc.Turn, doc.Model, w.turns[t][i])
				}
			}
		}
	}
	return nil
}

// patchText fills a patch's summary: plain words, nothing JSON escapes.
const patchText = "the user asked for the weather in three cities and the assistant answered with a table of forecasts "

// buildPatch is the merge patch of a turn, size bytes long:
// {"turn":N,"summary":"..."}.
func buildPatch(turn, size int) []byte {
	b := make([]byte, 0, size)
	b = append(b, `{"turn":`...)
	b = strconv.AppendInt(b, int64(turn), 10)
	b = append(b, `,"summary":"`...)
	for fill := size - len(b) - len(`"}`); fill > 0; {
		k := min(fill, len(patchText))
		b = append(b, patchText[:k]...)
		fill -= k
	}
	return append(b, `"}`...)
}

// semaqPath is a pair through the SDK: PatchSession, then GetSession.
type semaqPath struct{ c *client.Client }

func (p *semaqPath) create(ctx context.Context, id string, doc []byte) error {
	_, err := p.c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: id}, Data: doc, Revision: client.Rev(0)})
	return err
}

func (p *semaqPath) pair(ctx context.Context, id string, patch []byte) error {
	ref := semaq.SessionRef{ID: id}
	info, err := p.c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: patch})
	if err != nil {
		return err
	}
	s, err := p.c.GetSession(ctx, ref, 0)
	if err != nil {
		return err
	}
	if s.Revision != info.Revision {
		return fmt.Errorf("read revision %d after the patch made %d", s.Revision, info.Revision)
	}
	return nil
}

func (p *semaqPath) data(ctx context.Context, id string) ([]byte, error) {
	s, err := p.c.GetSession(ctx, semaq.SessionRef{ID: id}, 0)
	if err != nil {
		return nil, err
	}
	return s.Data, nil
}

func (p *semaqPath) close() { p.c.Close() }

// kvPath is the same pair with NATS KV alone: get, merge client-side,
// update on the revision read, get.
type kvPath struct {
	nc *nats.Conn
	kv jetstream.KeyValue
}

func (p *kvPath) create(ctx context.Context, id string, doc []byte) error {
	_, err := p.kv.Create(ctx, id, doc)
	return err
}

func (p *kvPath) pair(ctx context.Context, id string, patch []byte) error {
	e, err := p.kv.Get(ctx, id)
	if err != nil {
		return err
	}
	doc, err := mergePatch(e.Value(), patch)
	if err != nil {
		return err
	}
	rev, err := p.kv.Update(ctx, id, doc, e.Revision())
	if err != nil {
		// Every session has one writer, so a conflict is a bug, not
		// contention to retry.
		return err
	}
	e, err = p.kv.Get(ctx, id)
	if err != nil {
		return err
	}
	if e.Revision() != rev {
		return fmt.Errorf("read revision %d after the update made %d", e.Revision(), rev)
	}
	return nil
}

func (p *kvPath) data(ctx context.Context, id string) ([]byte, error) {
	e, err := p.kv.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

func (p *kvPath) close() { p.nc.Close() }
