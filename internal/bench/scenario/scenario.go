// Package scenario runs the AI workload scenarios of `semaq bench run`:
// a shipped or YAML scenario (Scenario, LoadScenario) is driven against
// SemaQ and its baselines, raw JetStream and optionally RabbitMQ, in turn
// on an embedded broker (RunScenario), and reported with goals, a
// diagnosis of what limited the run and an HTML page. The targets and
// reporting helpers it shares with the ingest benchmark live in package
// bench, which does not import this one; the latency histograms it shares
// with every benchmark, in package bench/measure.
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/semaq/semaq/bench/scenarios"
	"github.com/semaq/semaq/internal/bench"
)

// Scenario patterns: how messages move between the publishers, the stages
// of workers and the place latency is measured.
const (
	// PatternQueue: publishers → one stage of workers. Latency is publish
	// to delivery at a worker.
	PatternQueue = "queue"
	// PatternRequestReply: publishers send a request through the broker,
	// a worker answers on the requester's reply address. Latency is
	// request to reply.
	PatternRequestReply = "request-reply"
	// PatternPipeline: publishers → stage 1 → ... → stage Hops, each
	// worker forwarding to the next stage with the trace context
	// propagated. Latency is first publish to delivery at the last stage;
	// order is checked per session there.
	PatternPipeline = "pipeline"
	// PatternTokens: token streams, one stream per session, measured as
	// context-window throughput (CWPS) as well as per-token latency.
	PatternTokens = "tokens"
)

// Patterns lists the patterns a scenario file may name.
var Patterns = []string{PatternQueue, PatternRequestReply, PatternPipeline, PatternTokens}

// RabbitMQ targets: AMQP 0.9.1 with publisher confirms and manual
// acknowledgements, on a server the run is pointed at. TargetRabbitMQ
// declares classic queues, whose confirm of a persistent message may come
// before it is written (once a worker has acked it); TargetRabbitMQQuorum
// declares quorum queues, which write and fsync every message before
// confirming it, as SemaQ and JetStream with sync always do.
const (
	TargetRabbitMQ       = "rabbitmq"
	TargetRabbitMQQuorum = "rabbitmq-quorum"
)

// ScenarioTargets are the targets a scenario run may measure, in report
// order.
var ScenarioTargets = []string{bench.TargetSemaq, bench.TargetJetStream, TargetRabbitMQ, TargetRabbitMQQuorum}

// isRabbitMQ reports whether target is one of the RabbitMQ targets.
func isRabbitMQ(target string) bool {
	return target == TargetRabbitMQ || target == TargetRabbitMQQuorum
}

// Limits of a scenario file, so a typo cannot start an endless run or
// exhaust memory.
const (
	MaxConsumers = 256
	MaxHops      = 16
	MaxSessions  = 100_000
	MaxWork      = 10 * time.Second
)

// Scenario is one AI workload, as a YAML file in bench/scenarios states it:
// the load (rate, sizes, sessions), the topology (pattern, hops, workers),
// how long to run and what latency it must meet. The seed drives every
// random choice (payload sizes and contents, arrival jitter, session of
// each message), so two runs of a file offer exactly the same load.
type Scenario struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description" json:"description,omitempty"`
	Seed        uint64 `yaml:"seed" json:"seed"`
	Pattern     string `yaml:"pattern" json:"pattern"`
	// Durable: acknowledgements mean on disk. NATS targets run with sync
	// always (SemaQ group commit, raw JetStream sync_always on its own
	// server); RabbitMQ publishes persistent messages. Otherwise NATS runs
	// with interval sync and RabbitMQ publishes transient messages, both
	// into durable queues and streams; a quorum queue (rabbitmq-quorum)
	// stores and fsyncs every message either way.
	Durable  bool          `yaml:"durable" json:"durable"`
	Duration time.Duration `yaml:"duration" json:"duration"`
	Warmup   time.Duration `yaml:"warmup" json:"warmup"`
	// Interval is the width of one point of the time series (throughput,
	// lag, p99 per interval).
	Interval time.Duration `yaml:"interval" json:"interval"`
	// Rate is the offered load over all publishers in msgs/s, open loop
	// with exponential inter-arrival times drawn from the seed; latency is
	// measured from each message's scheduled time, so a target that falls
	// behind shows it. 0: closed loop, each publisher as fast as its
	// window allows (throughput scenarios).
	Rate       int `yaml:"rate" json:"rate"`
	Publishers int `yaml:"publishers" json:"publishers"`
	// Window bounds unacknowledged publishes per publisher, and each
	// worker's prefetch.
	Window int `yaml:"window" json:"window"`
	// Consumers is the number of workers of each stage.
	Consumers int `yaml:"consumers" json:"consumers"`
	// Hops is the number of stages of a pipeline; 1 otherwise.
	Hops int `yaml:"hops" json:"hops"`
	// Sessions is the number of session keys messages are spread over;
	// a session's messages are published in order by one publisher.
	Sessions int       `yaml:"sessions" json:"sessions"`
	Payload  SizeRange `yaml:"payload" json:"payload"`
	// Work is the time a worker spends on each message before passing it
	// on: the model call the broker is not measured on.
	Work time.Duration `yaml:"work" json:"work"`
	// AckWait is how long a target waits for a worker's ack before it
	// redelivers (NATS consumers; RabbitMQ has no equivalent below its
	// 30-minute consumer timeout).
	AckWait time.Duration `yaml:"ack_wait" json:"ack_wait"`
	// Trace gives every message a sampled W3C traceparent, and workers of
	// a pipeline a child span of it.
	Trace  bool       `yaml:"trace" json:"trace"`
	SLO    SLO        `yaml:"slo" json:"slo"`
	Tokens *TokenSpec `yaml:"tokens" json:"tokens,omitempty"`
	// Short replaces duration, warm-up and rate in short mode (tests,
	// --short), so every scenario runs in seconds.
	Short *ShortSpec `yaml:"short" json:"-"`
}

// SizeRange is the payload size of each message, drawn uniformly from
// [Min, Max] bytes.
type SizeRange struct {
	Min int `yaml:"min" json:"min"`
	Max int `yaml:"max" json:"max"`
}

// SLO is the latency a scenario must meet; zero fields are not checked.
type SLO struct {
	P99  time.Duration `yaml:"p99" json:"p99,omitempty"`
	P999 time.Duration `yaml:"p999" json:"p999,omitempty"`
}

// TokenSpec shapes the token streams of PatternTokens.
type TokenSpec struct {
	// PerStream is the number of tokens of one generated answer.
	PerStream int `yaml:"per_stream" json:"per_stream"`
	// Bytes is the size of one token frame's text.
	Bytes int `yaml:"bytes" json:"bytes"`
	// ContextWindow is the model's context window in tokens, the divisor of
	// CWPS: tokens per second / context window.
	ContextWindow int `yaml:"context_window" json:"context_window"`
}

// ShortSpec is what short mode changes.
type ShortSpec struct {
	Duration time.Duration `yaml:"duration"`
	Warmup   time.Duration `yaml:"warmup"`
	Rate     int           `yaml:"rate"`
}

// ScenarioNames lists the scenarios shipped with SemaQ (bench/scenarios).
func ScenarioNames() []string {
	entries, _ := fs.ReadDir(scenarios.FS, ".")
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			names = append(names, n)
		}
	}
	return names
}

// LoadScenario reads a shipped scenario by name, or a YAML file by path
// (anything with a slash or a .yaml/.yml extension).
func LoadScenario(nameOrFile string) (*Scenario, error) {
	if strings.ContainsRune(nameOrFile, filepath.Separator) || strings.ContainsRune(nameOrFile, '/') ||
		strings.HasSuffix(nameOrFile, ".yaml") || strings.HasSuffix(nameOrFile, ".yml") {
		b, err := os.ReadFile(nameOrFile)
		if err != nil {
			return nil, fmt.Errorf("%w: scenario: %w", bench.ErrBadConfig, err)
		}
		return ParseScenario(b, nameOrFile)
	}
	b, err := fs.ReadFile(scenarios.FS, nameOrFile+".yaml")
	if err != nil {
		return nil, fmt.Errorf("%w: scenario: %q is not a scenario (want one of %s, or a YAML file)", bench.ErrBadConfig, nameOrFile, strings.Join(ScenarioNames(), ", "))
	}
	return ParseScenario(b, nameOrFile+".yaml")
}

// ParseScenario reads a scenario from YAML and validates it. Unknown keys
// are errors, so a misspelt setting is not silently ignored. file names the
// source in errors.
func ParseScenario(b []byte, file string) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: scenario %s: empty file", bench.ErrBadConfig, file)
		}
		return nil, fmt.Errorf("%w: scenario %s: %w", bench.ErrBadConfig, file, err)
	}
	sc.defaults()
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", file, err)
	}
	return &sc, nil
}

// defaults fills the settings a file may leave out.
func (sc *Scenario) defaults() {
	if sc.Pattern == "" {
		sc.Pattern = PatternQueue
	}
	if sc.Interval == 0 {
		sc.Interval = time.Second
	}
	if sc.Publishers == 0 {
		sc.Publishers = 1
	}
	if sc.Window == 0 {
		sc.Window = 256
	}
	if sc.Consumers == 0 {
		sc.Consumers = 1
	}
	if sc.Hops == 0 {
		sc.Hops = 1
	}
	if sc.Sessions == 0 {
		sc.Sessions = 1
	}
	if sc.AckWait == 0 {
		sc.AckWait = 30 * time.Second
	}
	if sc.Payload.Max == 0 {
		sc.Payload.Max = sc.Payload.Min
	}
}

// Validate reports the first problem with sc, naming the setting.
func (sc *Scenario) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", bench.ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case strings.TrimSpace(sc.Name) == "":
		return bad("name: missing")
	case !slices.Contains(Patterns, sc.Pattern):
		return bad("pattern: %q is not a pattern (want %s)", sc.Pattern, strings.Join(Patterns, ", "))
	case sc.Duration <= 0 || sc.Duration > bench.MaxDuration:
		return bad("duration: %s is outside (0, %s]", sc.Duration, bench.MaxDuration)
	case sc.Warmup < 0 || sc.Warmup > bench.MaxDuration:
		return bad("warmup: %s is outside [0, %s]", sc.Warmup, bench.MaxDuration)
	case sc.Interval < 10*time.Millisecond || sc.Interval > sc.Duration:
		return bad("interval: %s is outside [10ms, duration %s]", sc.Interval, sc.Duration)
	case sc.Rate < 0 || sc.Rate > bench.MaxRate:
		return bad("rate: %d msgs/s is outside 0..%d", sc.Rate, bench.MaxRate)
	case sc.Publishers < 1 || sc.Publishers > bench.MaxPublishers:
		return bad("publishers: %d is outside 1..%d", sc.Publishers, bench.MaxPublishers)
	case sc.Window < 1 || sc.Window > bench.MaxWindow:
		return bad("window: %d is outside 1..%d", sc.Window, bench.MaxWindow)
	case sc.Consumers < 1 || sc.Consumers > MaxConsumers:
		return bad("consumers: %d is outside 1..%d", sc.Consumers, MaxConsumers)
	case sc.Hops < 1 || sc.Hops > MaxHops:
		return bad("hops: %d is outside 1..%d", sc.Hops, MaxHops)
	case sc.Hops > 1 && sc.Pattern != PatternPipeline:
		return bad("hops: %d stages need pattern %s, not %s", sc.Hops, PatternPipeline, sc.Pattern)
	case sc.Sessions < 1 || sc.Sessions > MaxSessions:
		return bad("sessions: %d is outside 1..%d", sc.Sessions, MaxSessions)
	case sc.Payload.Min < 0 || sc.Payload.Max > bench.MaxSize || sc.Payload.Min > sc.Payload.Max:
		return bad("payload: %d..%d bytes is not a range within 0..%d", sc.Payload.Min, sc.Payload.Max, bench.MaxSize)
	case sc.Work < 0 || sc.Work > MaxWork:
		return bad("work: %s is outside [0, %s]", sc.Work, MaxWork)
	case sc.AckWait < 100*time.Millisecond || sc.AckWait > time.Hour:
		return bad("ack_wait: %s is outside [100ms, 1h]", sc.AckWait)
	case sc.SLO.P99 < 0 || sc.SLO.P999 < 0:
		return bad("slo: negative latency")
	}
	if sc.Pattern == PatternTokens {
		t := sc.Tokens
		switch {
		case t == nil:
			return bad("tokens: pattern tokens needs a tokens section (per_stream, bytes, context_window)")
		case t.PerStream < 1 || t.PerStream > 1_000_000:
			return bad("tokens.per_stream: %d is outside 1..1000000", t.PerStream)
		case t.Bytes < 1 || t.Bytes > 4096:
			return bad("tokens.bytes: %d is outside 1..4096", t.Bytes)
		case t.ContextWindow < 1 || t.ContextWindow > 10_000_000:
			return bad("tokens.context_window: %d is outside 1..10000000", t.ContextWindow)
		}
	} else if sc.Tokens != nil {
		return bad("tokens: only pattern tokens takes a tokens section")
	}
	if s := sc.Short; s != nil {
		switch {
		case s.Duration < 0 || s.Duration > bench.MaxDuration:
			return bad("short.duration: %s is outside [0, %s]", s.Duration, bench.MaxDuration)
		case s.Warmup < 0 || s.Warmup > bench.MaxDuration:
			return bad("short.warmup: %s is outside [0, %s]", s.Warmup, bench.MaxDuration)
		case s.Rate < 0 || s.Rate > bench.MaxRate:
			return bad("short.rate: %d is outside 0..%d", s.Rate, bench.MaxRate)
		}
	}
	return nil
}

// shortened is sc as short mode runs it: the short section's duration,
// warm-up and rate (defaults: one second, none, a tenth of the rate), with
// the series interval shrunk to keep a few points.
func (sc Scenario) shortened() Scenario {
	s := ShortSpec{Duration: time.Second, Rate: sc.Rate / 10}
	if sc.Short != nil {
		if sc.Short.Duration > 0 {
			s.Duration = sc.Short.Duration
		}
		s.Warmup = sc.Short.Warmup
		if sc.Short.Rate > 0 {
			s.Rate = sc.Short.Rate
		}
	}
	if sc.Rate > 0 && s.Rate == 0 {
		s.Rate = 1
	}
	sc.Duration, sc.Warmup, sc.Rate = s.Duration, s.Warmup, s.Rate
	sc.Interval = min(sc.Interval, max(sc.Duration/5, 10*time.Millisecond))
	return sc
}
