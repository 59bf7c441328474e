package bench

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/semaq"
)

// Target names.
const (
	// TargetSemaq publishes on public subjects through the semantic ingress,
	// as any SemaQ client does.
	TargetSemaq = "semaq"
	// TargetSemaqNoSchema publishes like TargetSemaq, to a second SemaQ
	// stream with the same settings but no schema and no policy rule. Only
	// in runs with a schema or a policy: it measures, in the same run,
	// what enforcement costs.
	TargetSemaqNoSchema = "semaq-noschema"
	// TargetJetStream publishes straight into a JetStream stream with the
	// same storage settings: the baseline every SemaQ figure is a ratio of.
	TargetJetStream = "jetstream"
	// TargetSemaqInterval publishes like TargetSemaq, to a second SemaQ
	// stream with durability interval (no fsync before the ack), on the
	// same broker. Only in runs with sync always: SemaQ's fsync throughput
	// over this one is the group commit's efficiency.
	TargetSemaqInterval = "semaq-interval"
	// TargetJetStreamInterval publishes straight into a JetStream stream
	// on the broker's nats-server, which runs without sync_always. Only in
	// runs with sync always: its throughput over the sync_always
	// baseline's is the disk's ceiling, the most any group commit can gain
	// over one fsync per message on this machine.
	TargetJetStreamInterval = "jetstream-interval"
	// TargetJetStreamRelay publishes into a JetStream stream stored like
	// the SemaQ stream, through a relay (relay.go): one client of the
	// broker's nats-server that receives each message and publishes it
	// again, over the ingress's transport, and does nothing else. Raw
	// JetStream plus the one client hop SemaQ's ingress adds: SemaQ over
	// it is the cost of SemaQ's own work, it over the baseline the cost
	// of the hop. Only in runs with sync interval: with sync always the
	// SemaQ stream's durability is the ingress's group commit, which a
	// relay does not do.
	TargetJetStreamRelay = "jetstream-relay"
)

// TargetNames lists the targets in the order reports show them.
var TargetNames = []string{TargetSemaq, TargetSemaqNoSchema, TargetJetStream, TargetJetStreamRelay, TargetSemaqInterval, TargetJetStreamInterval}

// CeilingTargets are the targets of a run with sync always that also
// measures the ceiling: the durable pair and the same pair without fsync.
var CeilingTargets = []string{TargetSemaq, TargetJetStream, TargetSemaqInterval, TargetJetStreamInterval}

// DefaultTargets are the targets of DefaultIngestConfig; SchemaTargets are
// the ones to measure with a schema.
var (
	DefaultTargets = []string{TargetSemaq, TargetJetStream}
	SchemaTargets  = []string{TargetSemaq, TargetSemaqNoSchema, TargetJetStream}
)

// Limits of an ingest run, so a typo cannot start an hour-long run or
// exhaust memory.
const (
	MaxDuration   = time.Hour
	MaxWindow     = 1 << 16
	MaxPublishers = 64
	MaxRounds     = 100
	MaxRate       = 1_000_000
	MaxRates      = 16
	// MaxSize leaves room for the envelope under the broker's default
	// 1 MiB message limit.
	MaxSize = 1<<20 - 4096
)

// IngestConfig configures the ingest scenario. Start from
// DefaultIngestConfig; Validate reports the first bad setting.
type IngestConfig struct {
	// Targets to measure, each at most once.
	Targets []string `json:"targets"`
	// Duration is the measured time of each phase (throughput, latency, and
	// each rate of the paced phase) for each target. A run takes about
	// (2 + len(Rates)) × len(Targets) × Duration, plus the warm-up.
	Duration time.Duration `json:"duration"`
	// Warmup is the unmeasured publishing each target gets before the
	// first measured phase.
	Warmup time.Duration `json:"warmup"`
	// Size is the payload of one message in bytes; the envelope headers
	// come on top. With Payload, 0 sends Payload as is, and any other size
	// pads the longest string in it (see Payload).
	Size int `json:"size"`
	// Sync is the durability measured, broker.SyncInterval or
	// broker.SyncAlways. Interval: one broker holds both streams, neither
	// fsyncs before acking. Always: the SemaQ stream is an fsync stream
	// (group commit) and the raw stream runs on a second nats-server with
	// JetStream sync_always (one fsync per message).
	Sync string `json:"sync"`
	// Window bounds the unacknowledged asynchronous publishes of one
	// publisher in the throughput phase, and of the pacer.
	Window int `json:"window"`
	// Publishers is the number of connections publishing concurrently in
	// the throughput phase. The latency phase always uses one.
	Publishers int `json:"publishers"`
	// IngressShards runs the broker's ingress on this many shards
	// (broker.WithIngressShards); 0 lets the broker pick by cores.
	IngressShards int `json:"ingress_shards,omitempty"`
	// IngressTransport is the broker's ingress transport
	// (broker.IngressPipe or broker.IngressTCP); "" is the broker's default.
	IngressTransport string `json:"ingress_transport,omitempty"`
	// TraceParent gives every message a sampled W3C traceparent, as an
	// OpenTelemetry-instrumented client sends.
	TraceParent bool `json:"traceparent"`
	// Rates are the offered loads of the paced phase, in msgs/s: each target
	// publishes asynchronously on a fixed schedule at each rate for
	// Duration, with at most Window in flight, and every ack is timed.
	// Empty: no paced phase. DefaultRates is what the CLI uses with sync
	// always.
	Rates []int `json:"rates"`
	// E2E adds the end-to-end measure to the paced phase: a consumer on
	// each target's stream, as client.Subscribe makes it, receives the paced
	// messages, and each message's time from its publish call to its
	// receipt is recorded beside its publish-to-ack time (e2e.go). It
	// needs Rates.
	E2E bool `json:"e2e"`
	// Rounds splits each phase into this many slices per target, run in
	// alternating target order (A B, B A, ...), so slow drift in the
	// machine or the stores does not favour whichever target runs first.
	Rounds int `json:"rounds"`
	// Payload, when set, is what every message carries instead of
	// generated text: a JSON document. Without Schema it is sent as is. With
	// a JSON Schema it must match the schema and is sent as is; with Avro it
	// is the datum in Avro's JSON encoding (a union value may also be given
	// bare) and with Protobuf the file's first message in protojson, which
	// the run encodes and sends in Confluent's wire format (magic byte,
	// schema id, for Protobuf the message indexes, then the binary). Every
	// target gets the same bytes. Surrounding whitespace is dropped. With
	// Size > 0 the longest string value of the document is lengthened with
	// English text until the payload, as sent, is Size bytes (or, where a
	// length prefix grows by a byte, the largest size under it).
	Payload []byte `json:"-"`
	// PayloadFile names where Payload came from, for the report.
	PayloadFile string `json:"-"`
	// Schema, when set, makes the SemaQ target enforce a schema: the run
	// registers it under SchemaSubject, creates the SemaQ stream bound to
	// it (semaq.StreamConfig.Schema), and the ingress validates every
	// message. It needs Payload. The raw JetStream stream validates nothing.
	Schema *SchemaConfig `json:"-"`
	// Routes, when above 0, stores this many route rules on the publish
	// subject of each SemaQ target, each with a condition on the model
	// header that is false for every message: the ingress evaluates them
	// all and stores each message where it would without them. The raw
	// JetStream stream routes nothing.
	Routes int `json:"routes"`
	// Policy, when set, is a policy rule (docs/policy.md) the run adds on
	// the SemaQ target's subjects (its own subjects and streams are
	// replaced), so the ingress applies it to every message; the
	// comparison is TargetSemaqNoSchema, without it.
	Policy *semaq.PolicyRule `json:"policy,omitempty"`
	// DataDir is where the broker keeps its files: a directory that is
	// empty or does not exist yet, kept afterwards. Empty means a new
	// temporary directory, removed afterwards.
	DataDir string `json:"-"`
	// Progress, when set, receives one line per step of the run.
	Progress io.Writer `json:"-"`
}

// SchemaSubject is the registry subject a run registers Schema under.
const SchemaSubject = "bench-semaq-value"

// SchemaConfig is a schema for the SemaQ target to enforce.
type SchemaConfig struct {
	// Type is schema.TypeJSON, schema.TypeAvro or schema.TypeProtobuf.
	Type schema.Type
	// Text is the schema as registered: a JSON Schema, an Avro schema, or
	// one .proto file whose imports are all google/protobuf ones (the run
	// registers no references).
	Text string
	// File names where Text came from, for the report.
	File string
}

// SchemaTypes are the schema types a run can enforce.
var SchemaTypes = []schema.Type{schema.TypeJSON, schema.TypeAvro, schema.TypeProtobuf}

// DefaultRates are the offered loads of the paced phase when durability is
// measured (sync always): a quiet and a busy stream.
var DefaultRates = []int{1000, 10000}

// DefaultIngestConfig measures both targets for five seconds per phase with
// 1 KiB messages, a full envelope and interval sync.
func DefaultIngestConfig() IngestConfig {
	return IngestConfig{
		Targets:     slices.Clone(DefaultTargets),
		Duration:    5 * time.Second,
		Warmup:      time.Second,
		Size:        1024,
		Sync:        broker.SyncInterval,
		Window:      256,
		Publishers:  1,
		Rounds:      4,
		TraceParent: true,
	}
}

// Validate reports the first problem with c, naming the setting.
func (c *IngestConfig) Validate() error {
	if len(c.Targets) == 0 {
		return fmt.Errorf("%w: targets: none given (want one or more of %s)", ErrBadConfig, strings.Join(TargetNames, ", "))
	}
	for i, t := range c.Targets {
		if !slices.Contains(TargetNames, t) {
			return fmt.Errorf("%w: targets: %q is not a target (want %s)", ErrBadConfig, t, strings.Join(TargetNames, ", "))
		}
		if slices.Contains(c.Targets[:i], t) {
			return fmt.Errorf("%w: targets: %q is given twice", ErrBadConfig, t)
		}
		if t == TargetSemaqNoSchema && c.Schema == nil && c.Policy == nil {
			return fmt.Errorf("%w: targets: %q is the comparison for a run with a schema or a policy; give one", ErrBadConfig, t)
		}
		if (t == TargetSemaqInterval || t == TargetJetStreamInterval) && c.Sync != broker.SyncAlways {
			return fmt.Errorf("%w: targets: %q is the no-fsync comparison for a run with sync %s", ErrBadConfig, t, broker.SyncAlways)
		}
		if t == TargetJetStreamRelay && c.Sync != broker.SyncInterval {
			return fmt.Errorf("%w: targets: %q stores like a SemaQ stream only with sync %s (with %s the ingress's group commit makes the SemaQ stream durable, which a relay does not do)", ErrBadConfig, t, broker.SyncInterval, broker.SyncAlways)
		}
	}
	if c.Duration <= 0 || c.Duration > MaxDuration {
		return fmt.Errorf("%w: duration: %s is outside (0, %s]", ErrBadConfig, c.Duration, MaxDuration)
	}
	if c.Warmup < 0 || c.Warmup > MaxDuration {
		return fmt.Errorf("%w: warmup: %s is outside [0, %s]", ErrBadConfig, c.Warmup, MaxDuration)
	}
	if c.Size < 0 || c.Size > MaxSize {
		return fmt.Errorf("%w: size: %d bytes is outside 0..%d", ErrBadConfig, c.Size, MaxSize)
	}
	switch c.Sync {
	case broker.SyncInterval, broker.SyncAlways:
	default:
		return fmt.Errorf("%w: sync: %q is not a sync mode (want %s or %s)", ErrBadConfig, c.Sync, broker.SyncInterval, broker.SyncAlways)
	}
	if c.Window < 1 || c.Window > MaxWindow {
		return fmt.Errorf("%w: window: %d is outside 1..%d", ErrBadConfig, c.Window, MaxWindow)
	}
	if c.Publishers < 1 || c.Publishers > MaxPublishers {
		return fmt.Errorf("%w: publishers: %d is outside 1..%d", ErrBadConfig, c.Publishers, MaxPublishers)
	}
	switch c.IngressTransport {
	case "", broker.IngressPipe, broker.IngressTCP:
	default:
		return fmt.Errorf("%w: ingress-transport: %q is not %s or %s", ErrBadConfig, c.IngressTransport, broker.IngressPipe, broker.IngressTCP)
	}
	if c.IngressShards < 0 || c.IngressShards > 64 {
		return fmt.Errorf("%w: ingress-shards: %d is outside 0..64", ErrBadConfig, c.IngressShards)
	}
	if len(c.Rates) > MaxRates {
		return fmt.Errorf("%w: rates: %d rates, at most %d", ErrBadConfig, len(c.Rates), MaxRates)
	}
	for i, r := range c.Rates {
		if r < 1 || r > MaxRate {
			return fmt.Errorf("%w: rates: %d msgs/s is outside 1..%d", ErrBadConfig, r, MaxRate)
		}
		if slices.Contains(c.Rates[:i], r) {
			return fmt.Errorf("%w: rates: %d is given twice", ErrBadConfig, r)
		}
	}
	if c.E2E && len(c.Rates) == 0 {
		return fmt.Errorf("%w: e2e: the end-to-end latency is measured in the paced phase; give one or more rates", ErrBadConfig)
	}
	if c.Payload != nil && len(bytes.TrimSpace(c.Payload)) == 0 {
		return fmt.Errorf("%w: payload: %s is empty", ErrBadConfig, nameOr(c.PayloadFile, "the payload"))
	}
	if s := c.Schema; s != nil {
		if !slices.Contains(SchemaTypes, s.Type) {
			return fmt.Errorf("%w: schema: type %q is not one of JSON, AVRO, PROTOBUF", ErrBadConfig, s.Type)
		}
		if strings.TrimSpace(s.Text) == "" {
			return fmt.Errorf("%w: schema: %s is empty", ErrBadConfig, nameOr(s.File, "the schema"))
		}
		if c.Payload == nil {
			return fmt.Errorf("%w: payload: a schema needs a sample payload that matches it", ErrBadConfig)
		}
	}
	if c.Routes < 0 || c.Routes > MaxRoutes {
		return fmt.Errorf("%w: routes: %d is outside 0..%d", ErrBadConfig, c.Routes, MaxRoutes)
	}
	if c.Rounds < 1 || c.Rounds > MaxRounds {
		return fmt.Errorf("%w: rounds: %d is outside 1..%d", ErrBadConfig, c.Rounds, MaxRounds)
	}
	if c.Duration/time.Duration(c.Rounds) < time.Millisecond {
		return fmt.Errorf("%w: rounds: %d rounds of %s leave under a millisecond each", ErrBadConfig, c.Rounds, c.Duration)
	}
	return nil
}

// nameOr is name, or what when name is empty.
func nameOr(name, what string) string {
	if name == "" {
		return what
	}
	return name
}
