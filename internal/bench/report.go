package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

// Goals SemaQ's ingress is measured against (docs/benchmarks/ingress.md).
const (
	// GoalThroughputRatio is the least ingress throughput, as a fraction of
	// raw JetStream's.
	GoalThroughputRatio = 0.85
	// GoalP50DeltaUS is the most a synchronous publish through the ingress
	// may add to raw JetStream's median, in microseconds.
	GoalP50DeltaUS = 30.0
	// GoalDurableThroughputRatio is the least throughput of a SemaQ fsync
	// stream (group commit), as a multiple of raw JetStream with
	// sync_always (one fsync per message).
	GoalDurableThroughputRatio = 10.0
	// GoalSchemaThroughputRatio is the least ingress throughput with every
	// message validated against a schema, as a fraction of raw JetStream's
	// (which validates nothing).
	GoalSchemaThroughputRatio = 0.7
	// GoalGroupCommitEfficiency is the least throughput of a SemaQ fsync
	// stream as a fraction of a SemaQ interval stream's in the same run:
	// what the group commit may cost over not fsyncing at all.
	GoalGroupCommitEfficiency = 0.8
)

// Durabilities a report names: how a target's acks were made durable.
const (
	// DurabilityFsync: an ack means on disk; the ingress group-commits.
	DurabilityFsync = broker.DurabilityFsync
	// DurabilityInterval: an ack means written to the OS; fsync on a timer.
	DurabilityInterval = broker.DurabilityInterval
	// DurabilitySyncAlways: JetStream fsyncs every message before its ack.
	DurabilitySyncAlways = "sync_always"
)

// Report is the outcome of one scenario run. Its JSON form is the --json
// output of `semaq bench`.
type Report struct {
	Scenario string       `json:"scenario"`
	Config   ReportConfig `json:"config"`
	Results  []Result     `json:"results"`
	// Goals is set when both SemaQ and the JetStream baseline were measured.
	Goals *Goals `json:"goals,omitempty"`
	// Validation is set when the SemaQ stream enforced a schema.
	Validation *Validation `json:"validation,omitempty"`
	// SchemaCost is set when SemaQ ran with and without the schema.
	SchemaCost *SchemaCost `json:"schema_cost,omitempty"`
	// Ceiling is set when a run with sync always also measured the
	// targets without fsync (CeilingTargets).
	Ceiling *Ceiling `json:"ceiling,omitempty"`
	// Floor is set when SemaQ ran beside the relay (TargetJetStreamRelay).
	Floor *Floor `json:"floor,omitempty"`
	// Dispatch holds the figures of the dispatch scenario (package
	// bench/dispatch; their types are in report_dispatch.go).
	Dispatch *DispatchReport `json:"dispatch,omitempty"`
}

// SchemaCost is what enforcing the schema cost the ingress in this run:
// TargetSemaq against TargetSemaqNoSchema, same payload, same rounds.
type SchemaCost struct {
	// ThroughputRatio is semaq's throughput over semaq-noschema's.
	ThroughputRatio float64 `json:"throughput_ratio"`
	// LatencyDeltaUS is semaq's sequential publish latency minus
	// semaq-noschema's.
	LatencyDeltaUS measure.Latency `json:"latency_delta_us"`
}

// Floor is SemaQ against the relay in this run: raw JetStream plus the
// one client hop SemaQ's ingress adds, and nothing else. The relay's own
// ratio to the baseline (its Result.RatioVsJetStream) is what the hop
// costs; SemaQ's over the relay's is what SemaQ's own work costs beyond
// it.
type Floor struct {
	// ThroughputRatio is semaq's throughput over jetstream-relay's.
	ThroughputRatio float64 `json:"semaq_ratio_vs_relay"`
	// LatencyDeltaUS is semaq's sequential publish latency minus
	// jetstream-relay's.
	LatencyDeltaUS measure.Latency `json:"semaq_latency_delta_us_vs_relay"`
}

// ReportConfig records what was run and where.
type ReportConfig struct {
	Targets     []string `json:"targets"`
	Duration    string   `json:"duration"` // per phase per target
	Warmup      string   `json:"warmup"`
	Size        int      `json:"size"`
	Sync        string   `json:"sync"`
	Window      int      `json:"window"`
	Publishers  int      `json:"publishers"`
	Rounds      int      `json:"rounds"`
	TraceParent bool     `json:"traceparent"`
	Rates       []int    `json:"rates,omitempty"` // offered loads of the paced phase, msgs/s
	// E2E: the paced phase also timed each message from its publish to its
	// receipt by a consumer (PacedResult.E2E).
	E2E bool `json:"e2e,omitempty"`
	// Routes is the route rules on each SemaQ target's subject, none
	// matching (IngestConfig.Routes).
	Routes int `json:"routes,omitempty"`
	// Policy is the policy rule on the SemaQ target's subjects
	// (IngestConfig.Policy).
	Policy *semaq.PolicyRule `json:"policy,omitempty"`
	// Payload names the file every message's payload came from; empty for
	// generated text. PayloadPadded: its longest string was lengthened to
	// make Size.
	Payload       string `json:"payload,omitempty"`
	PayloadPadded bool   `json:"payload_padded,omitempty"`
	// Schema is what the SemaQ stream enforced, if anything.
	Schema *SchemaSetup `json:"schema,omitempty"`
	// Setup says where each target ran and how its acks were made durable,
	// as read back from the running servers.
	Setup      []TargetSetup `json:"setup"`
	GoVersion  string        `json:"go_version"`
	Platform   string        `json:"platform"`
	CPUs       int           `json:"cpus"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	NATSServer string        `json:"nats_server"`
	SemaQ      string        `json:"semaq"`
}

// TargetSetup is where one target ran.
type TargetSetup struct {
	Target string `json:"target"`
	// Server is ServerBroker (the SemaQ broker's embedded nats-server) or
	// ServerRaw (a second embedded nats-server with only JetStream).
	Server string `json:"server"`
	Stream string `json:"stream"`
	// JetStreamSyncAlways is the JetStream sync_always setting of the
	// target's server.
	JetStreamSyncAlways bool `json:"jetstream_sync_always"`
	// Durability is DurabilityFsync, DurabilityInterval or
	// DurabilitySyncAlways.
	Durability string `json:"durability"`
	// Schema is the registry subject the stream's subjects are bound to, as
	// the broker reports it: every message is validated. Empty: none.
	Schema string `json:"schema,omitempty"`
	// IngressTransport is how the broker's ingress reaches its
	// nats-server (broker.IngressPipe or broker.IngressTCP); SemaQ
	// targets only, and TargetJetStreamRelay, whose relay uses the same.
	IngressTransport string `json:"ingress_transport,omitempty"`
}

// SchemaSetup is the schema a run registered and bound the SemaQ stream
// to.
type SchemaSetup struct {
	Type    string `json:"type"` // JSON, AVRO, PROTOBUF
	File    string `json:"file,omitempty"`
	Subject string `json:"subject"` // registry subject
	ID      int    `json:"id"`      // registry id
	// ConfluentFramed: payloads carry Confluent's header (magic byte 0 and
	// the id), as Avro and Protobuf serializers send them. Otherwise they
	// are plain JSON, validated against the subject's latest version.
	ConfluentFramed bool `json:"confluent_framed"`
}

// Describe says in words what an ack of the target means.
func (s TargetSetup) Describe() string {
	server := "the broker's nats-server"
	if s.Server == ServerRaw {
		server = "its own nats-server"
	}
	var ack string
	switch s.Durability {
	case DurabilityFsync:
		ack = "durability fsync: acks group-committed by the ingress"
	case DurabilitySyncAlways:
		ack = "fsync per message before the ack"
	default:
		ack = "durability interval: no fsync before the ack"
	}
	var bound string
	if s.Schema != "" {
		bound = ", every message validated against registry subject " + s.Schema
	}
	var via string
	switch {
	case s.Target == TargetJetStreamRelay:
		via = ", through one relaying client (no SemaQ work) over the in-process pipe"
		if s.IngressTransport == broker.IngressTCP {
			via = ", through one relaying client (no SemaQ work) over loopback TCP"
		}
	case s.IngressTransport == broker.IngressTCP:
		via = ", ingress over loopback TCP"
	}
	return fmt.Sprintf("%s on %s (JetStream sync_always %v)%s, stream %s, %s%s", s.Target, server, s.JetStreamSyncAlways, via, s.Stream, ack, bound)
}

// reportConfig records c as run: with the payload's size as sent, and the
// schema under the id the registry gave it.
func reportConfig(c *IngestConfig, setup []TargetSetup, pl *payload, schemaID int) ReportConfig {
	rc := ReportConfig{
		Targets:     c.Targets,
		Duration:    c.Duration.String(),
		Warmup:      c.Warmup.String(),
		Size:        pl.size(),
		Sync:        c.Sync,
		Window:      c.Window,
		Publishers:  c.Publishers,
		Rounds:      c.Rounds,
		TraceParent: c.TraceParent,
		Rates:       c.Rates,
		E2E:         c.E2E,
		Routes:      c.Routes,
		Policy:      c.Policy,
		Setup:       setup,
		GoVersion:   runtime.Version(),
		Platform:    runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:        runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		NATSServer:  server.VERSION,
		SemaQ:       broker.Version,
	}
	if c.Payload != nil {
		rc.Payload, rc.PayloadPadded = nameOr(c.PayloadFile, "(given)"), pl.padded
	}
	if sc := c.Schema; sc != nil {
		rc.Schema = &SchemaSetup{Type: string(sc.Type), File: sc.File, Subject: SchemaSubject, ID: schemaID, ConfluentFramed: pl.framed}
	}
	return rc
}

// Result is what one target achieved.
type Result struct {
	Target string `json:"target"`
	// ThroughputMsgsPerS counts acknowledged messages of the throughput
	// phase per second.
	ThroughputMsgsPerS float64 `json:"throughput_msgs_per_s"`
	ThroughputMBPerS   float64 `json:"throughput_mb_per_s"` // payload only, 10^6 bytes
	// ByRound is the throughput of each round, in run order: a spread
	// much wider than between targets means the machine was busy.
	ByRound []float64 `json:"throughput_by_round_msgs_per_s"`
	// Latency is the synchronous publish latency, publish to ack.
	Latency        measure.Latency `json:"latency_us"`
	Msgs           int64           `json:"msgs"` // acknowledged in the throughput phase
	LatencySamples int64           `json:"latency_samples"`
	// Errors counts failed publishes of both measured phases.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// RatioVsJetStream is this target's throughput over raw JetStream's;
	// set on targets other than the baseline when it was measured.
	RatioVsJetStream *float64 `json:"ratio_vs_jetstream,omitempty"`
	// LatencyDeltaUS is this target's latency minus raw JetStream's.
	LatencyDeltaUS *measure.Latency `json:"latency_delta_us_vs_jetstream,omitempty"`
	// ThroughputCPUCores is the CPU the whole process used during this
	// target's throughput phase, in cores (CPU seconds per second), and
	// ThroughputCPUPerMsgUS that CPU per acknowledged message. A target
	// that is CPU-bound on an idle machine uses about every core; one
	// that used far fewer while its CPU per message stayed the same was
	// starved by other jobs. Both are 0 where not measured.
	ThroughputCPUCores    float64 `json:"throughput_cpu_cores,omitempty"`
	ThroughputCPUPerMsgUS float64 `json:"throughput_cpu_us_per_msg,omitempty"`
	// ThroughputAcksPerFsync is the mean group-commit batch of the
	// throughput phase; set for an fsync stream.
	ThroughputAcksPerFsync float64 `json:"throughput_acks_per_fsync,omitempty"`
	// Paced is the latency at each offered rate, in the order of the rates.
	Paced []PacedResult `json:"paced,omitempty"`
	// GroupCommit is what `semaq stream info` reports for an fsync stream
	// at the end of the run (all phases, warm-up included).
	GroupCommit *semaq.CommitStats `json:"group_commit,omitempty"`
}

// PacedResult is one target at one offered rate.
type PacedResult struct {
	Rate             int     `json:"rate"` // offered, msgs/s
	AchievedMsgsPerS float64 `json:"achieved_msgs_per_s"`
	// Sustained: at most 1% of the offered messages were skipped,
	// unacknowledged or failed. If not, the target could not keep up and
	// its latencies are queueing-dominated: the window of messages in
	// flight over the rate it achieved.
	Sustained bool `json:"sustained"`
	// Latency is publish to ack of each acknowledged message.
	Latency measure.Latency `json:"latency_us"`
	Offered int64           `json:"offered"`
	Sent    int64           `json:"sent"`
	Acked   int64           `json:"acked"`
	// Skipped messages were not sent: the window was full at their time.
	Skipped int64 `json:"skipped"`
	// Late messages were sent more than 2 ms after their time (the pacer
	// was not scheduled in time).
	Late int64 `json:"late"`
	// Unacked messages had no ack 10 s after the slice's last send.
	Unacked    int64  `json:"unacked"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// LatencyDeltaUS is the latency SemaQ adds to raw JetStream at this
	// rate; set only when both sustained it (otherwise the baseline's
	// figure is a queue, not a latency).
	LatencyDeltaUS *measure.Latency `json:"latency_delta_us_vs_jetstream,omitempty"`
	// Fsyncs and AcksPerFsync are the group commits during this rate's
	// slices; set for an fsync stream.
	Fsyncs       uint64  `json:"fsyncs,omitempty"`
	AcksPerFsync float64 `json:"acks_per_fsync,omitempty"`
	// CPUPerMsgUS is the CPU the whole process used during this rate's
	// slices (publisher, servers, ingress, and with E2E the consumer) per
	// message sent; 0 where not measured. At a paced rate it is several
	// times the throughput phase's: each burst wakes every goroutine on the
	// way again.
	CPUPerMsgUS float64 `json:"cpu_us_per_msg,omitempty"`
	// E2E is publish to receipt by a consumer of the same messages; set
	// when the run measured it (IngestConfig.E2E).
	E2E *E2EResult `json:"e2e,omitempty"`
}

// Goals compares SemaQ with the baseline against GoalThroughputRatio (or
// GoalSchemaThroughputRatio when SemaQ enforced a schema) and
// GoalP50DeltaUS. Missing a goal is a finding, not an error.
type Goals struct {
	ThroughputRatio    float64 `json:"throughput_ratio"`
	ThroughputRatioMin float64 `json:"throughput_ratio_min"`
	ThroughputMet      bool    `json:"throughput_met"`
	P50DeltaUS         float64 `json:"p50_delta_us"`
	P50DeltaUSMax      float64 `json:"p50_delta_us_max"`
	P50Met             bool    `json:"p50_met"`
	// The durable goal, set when SemaQ ran an fsync stream against a raw
	// baseline with sync_always: throughput_ratio ≥ this.
	DurableThroughputRatioMin float64 `json:"durable_throughput_ratio_min,omitempty"`
	DurableThroughputMet      *bool   `json:"durable_throughput_met,omitempty"`
	// E2E is the end-to-end goal, set when the run measured it at
	// GoalE2ERate.
	E2E *E2EGoal `json:"e2e,omitempty"`
}

// Ceiling bounds the durable ratio by what the machine allows. A group
// commit fsyncs less often than once per message, never less than not at
// all: its throughput cannot pass the same store's without fsync. So the
// durable ratio (SemaQ fsync over raw sync_always) is at most the disk's
// ratio (raw without fsync over raw sync_always) times the group commit's
// efficiency (SemaQ fsync over SemaQ interval) times SemaQ interval over
// raw without fsync. Each is set when both of its targets ran.
type Ceiling struct {
	// DiskRatio is TargetJetStreamInterval's throughput over
	// TargetJetStream's with sync_always: the most a group commit can
	// gain over one fsync per message on this machine in this run.
	DiskRatio *float64 `json:"disk_ratio,omitempty"`
	// GroupCommitEfficiency is TargetSemaq's (fsync) throughput over
	// TargetSemaqInterval's.
	GroupCommitEfficiency    *float64 `json:"group_commit_efficiency,omitempty"`
	GroupCommitEfficiencyMin float64  `json:"group_commit_efficiency_min,omitempty"`
	GroupCommitEfficiencyMet *bool    `json:"group_commit_efficiency_met,omitempty"`
	// IntervalRatio is TargetSemaqInterval's throughput over
	// TargetJetStreamInterval's: the ingress's own cost without fsync.
	IntervalRatio *float64 `json:"interval_ratio,omitempty"`
	// DurableGoalReachable says whether DiskRatio is at least the durable
	// goal (GoalDurableThroughputRatio): below, no group commit can meet
	// it on this machine in this run.
	DurableGoalReachable *bool `json:"durable_goal_reachable,omitempty"`
}

// ceiling sets r.Ceiling from the results of CeilingTargets.
func (r *Report) ceiling() {
	ratio := func(a, b string) *float64 {
		x, y := r.Result(a), r.Result(b)
		if x == nil || y == nil || y.ThroughputMsgsPerS == 0 {
			return nil
		}
		v := math.Round(x.ThroughputMsgsPerS/y.ThroughputMsgsPerS*1000) / 1000
		return &v
	}
	c := &Ceiling{
		DiskRatio:             ratio(TargetJetStreamInterval, TargetJetStream),
		GroupCommitEfficiency: ratio(TargetSemaq, TargetSemaqInterval),
		IntervalRatio:         ratio(TargetSemaqInterval, TargetJetStreamInterval),
	}
	if c.DiskRatio == nil && c.GroupCommitEfficiency == nil && c.IntervalRatio == nil {
		return
	}
	if c.DiskRatio != nil {
		ok := *c.DiskRatio >= GoalDurableThroughputRatio
		c.DurableGoalReachable = &ok
	}
	if c.GroupCommitEfficiency != nil {
		met := *c.GroupCommitEfficiency >= GoalGroupCommitEfficiency
		c.GroupCommitEfficiencyMin, c.GroupCommitEfficiencyMet = GoalGroupCommitEfficiency, &met
	}
	r.Ceiling = c
}

// line is the ceiling for people, one line.
func (c *Ceiling) line() string {
	var parts []string
	if c.DiskRatio != nil {
		reach := "the durable goal of " + fmt.Sprintf("%.0f×", GoalDurableThroughputRatio) + " is within it"
		if !*c.DurableGoalReachable {
			reach = "below the durable goal of " + fmt.Sprintf("%.0f×", GoalDurableThroughputRatio) + ": no group commit can meet it here"
		}
		parts = append(parts, fmt.Sprintf("disk: %s over %s sync_always %.2f× (the most any group commit can gain; %s)",
			TargetJetStreamInterval, TargetJetStream, *c.DiskRatio, reach))
	}
	if c.GroupCommitEfficiency != nil {
		parts = append(parts, fmt.Sprintf("group commit: %s fsync over %s %.3f (≥ %.2f %s)",
			TargetSemaq, TargetSemaqInterval, *c.GroupCommitEfficiency, c.GroupCommitEfficiencyMin, MetWord(*c.GroupCommitEfficiencyMet)))
	}
	if c.IntervalRatio != nil {
		parts = append(parts, fmt.Sprintf("ingress without fsync: %s over %s %.3f", TargetSemaqInterval, TargetJetStreamInterval, *c.IntervalRatio))
	}
	return "ceiling (same run): " + strings.Join(parts, "; ") + "\n"
}

// Result returns the result of target, or nil.
func (r *Report) Result(target string) *Result {
	for i := range r.Results {
		if r.Results[i].Target == target {
			return &r.Results[i]
		}
	}
	return nil
}

// compare sets the ratios to the baseline, the goals, the cost of schema
// enforcement and SemaQ over the relay.
func (r *Report) compare() {
	r.ceiling()
	if s, f := r.Result(TargetSemaq), r.Result(TargetJetStreamRelay); s != nil && f != nil && f.ThroughputMsgsPerS > 0 {
		r.Floor = &Floor{
			ThroughputRatio: math.Round(s.ThroughputMsgsPerS/f.ThroughputMsgsPerS*1000) / 1000,
			LatencyDeltaUS:  s.Latency.Sub(f.Latency),
		}
	}
	if s, n := r.Result(TargetSemaq), r.Result(TargetSemaqNoSchema); s != nil && n != nil && n.ThroughputMsgsPerS > 0 {
		r.SchemaCost = &SchemaCost{
			ThroughputRatio: math.Round(s.ThroughputMsgsPerS/n.ThroughputMsgsPerS*1000) / 1000,
			LatencyDeltaUS:  s.Latency.Sub(n.Latency),
		}
	}
	base := r.Result(TargetJetStream)
	if base == nil || base.ThroughputMsgsPerS == 0 {
		return
	}
	for i := range r.Results {
		res := &r.Results[i]
		if res.Target == TargetJetStream {
			continue
		}
		ratio := math.Round(res.ThroughputMsgsPerS/base.ThroughputMsgsPerS*1000) / 1000
		delta := res.Latency.Sub(base.Latency)
		res.RatioVsJetStream, res.LatencyDeltaUS = &ratio, &delta
		for j := range res.Paced {
			p := &res.Paced[j]
			b := base.paced(p.Rate)
			if b != nil && b.Sustained && p.Sustained {
				d := p.Latency.Sub(b.Latency)
				p.LatencyDeltaUS = &d
			}
			if b != nil {
				p.E2E.compare(b.E2E)
			}
		}
		if res.Target == TargetSemaq {
			minRatio := GoalThroughputRatio
			if r.Config.Schema != nil {
				minRatio = GoalSchemaThroughputRatio
			}
			r.Goals = &Goals{
				ThroughputRatio:    ratio,
				ThroughputRatioMin: minRatio,
				ThroughputMet:      ratio >= minRatio,
				P50DeltaUS:         delta.P50,
				P50DeltaUSMax:      GoalP50DeltaUS,
				P50Met:             delta.P50 <= GoalP50DeltaUS,
			}
			if r.durable() {
				met := ratio >= GoalDurableThroughputRatio
				r.Goals.DurableThroughputRatioMin, r.Goals.DurableThroughputMet = GoalDurableThroughputRatio, &met
			}
			r.Goals.E2E = e2eGoal(res, base)
		}
	}
}

// durable reports whether SemaQ's fsync stream ran against the sync_always
// baseline.
func (r *Report) durable() bool {
	var fsync, always bool
	for _, s := range r.Config.Setup {
		fsync = fsync || s.Target == TargetSemaq && s.Durability == DurabilityFsync
		always = always || s.Target == TargetJetStream && s.Durability == DurabilitySyncAlways
	}
	return fsync && always
}

// paced returns the paced result at rate, or nil.
func (res *Result) paced(rate int) *PacedResult {
	for i := range res.Paced {
		if res.Paced[i].Rate == rate {
			return &res.Paced[i]
		}
	}
	return nil
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people: where each target ran, one line per
// target, one per comparison with the baseline, the paced latencies, and
// the goals.
func (r *Report) WriteTable(w io.Writer) error {
	c := &r.Config
	var b strings.Builder
	envelope := "envelope with traceparent"
	if !c.TraceParent {
		envelope = "envelope without traceparent"
	}
	fmt.Fprintf(&b, "%s: %d-byte messages, %s, sync %s, %s per phase per target in %d round(s), window %d, %d publisher(s)\n",
		r.Scenario, c.Size, envelope, c.Sync, c.Duration, c.Rounds, c.Window, c.Publishers)
	fmt.Fprintf(&b, "%s %s, %d CPUs, nats-server %s, semaq %s\n", c.GoVersion, c.Platform, c.CPUs, c.NATSServer, c.SemaQ)
	for _, s := range c.Setup {
		fmt.Fprintf(&b, "  %s\n", s.Describe())
	}
	if p := c.Policy; p != nil {
		fmt.Fprintf(&b, "  policy %s on %s's subjects: redact %s (%s), %d words, %d patterns\n", p.Name, TargetSemaq,
			strings.Join(p.Redact, ","), p.Action, len(p.Words), len(p.Patterns))
	}
	if c.Routes > 0 {
		fmt.Fprintf(&b, "  routes: %d rules on each SemaQ target's subject, none matching\n", c.Routes)
	}
	r.writePayload(&b)
	b.WriteString("\n")
	// Numbers align right; the first column is padded to align left.
	width := len("target")
	for _, res := range r.Results {
		if res.RatioVsJetStream != nil {
			width = max(width, len(res.Target+" vs "+TargetJetStream))
		}
		width = max(width, len(res.Target))
	}
	if r.Floor != nil {
		width = max(width, len(TargetSemaq+" vs "+TargetJetStreamRelay))
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tmsgs/s\tMB/s\tp50 µs\tp99 µs\tp99.9 µs\tacked\tsamples\terrors\t\n", width, "target")
	for _, res := range r.Results {
		l := res.Latency
		fmt.Fprintf(tw, "%-*s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t\n",
			width, res.Target, res.ThroughputMsgsPerS, res.ThroughputMBPerS, l.P50, l.P99, l.P999, res.Msgs, res.LatencySamples, res.Errors)
	}
	for _, res := range r.Results {
		if res.RatioVsJetStream == nil {
			continue
		}
		d := res.LatencyDeltaUS
		fmt.Fprintf(tw, "%-*s\t%.3f×\t\t%+.1f\t%+.1f\t%+.1f\t\t\t\t\n",
			width, res.Target+" vs "+TargetJetStream, *res.RatioVsJetStream, d.P50, d.P99, d.P999)
	}
	if f := r.Floor; f != nil {
		d := f.LatencyDeltaUS
		fmt.Fprintf(tw, "%-*s\t%.3f×\t\t%+.1f\t%+.1f\t%+.1f\t\t\t\t\n",
			width, TargetSemaq+" vs "+TargetJetStreamRelay, f.ThroughputRatio, d.P50, d.P99, d.P999)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Rounds > 1 {
		b.WriteString("\nthroughput by round (msgs/s, run order):")
		for _, res := range r.Results {
			fmt.Fprintf(&b, " %s", res.Target)
			for _, v := range res.ByRound {
				fmt.Fprintf(&b, " %.0f", v)
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	if len(r.Results) > 0 && r.Results[0].ThroughputCPUCores > 0 {
		fmt.Fprintf(&b, "process CPU in the throughput phase (of %d cores):", runtime.NumCPU())
		for _, res := range r.Results {
			fmt.Fprintf(&b, " %s %.2f cores, %.1f µs/msg;", res.Target, res.ThroughputCPUCores, res.ThroughputCPUPerMsgUS)
		}
		b.WriteString("\n")
	}
	if sc := r.SchemaCost; sc != nil {
		d := sc.LatencyDeltaUS
		what := "schema enforcement"
		switch {
		case r.Config.Policy != nil && r.Config.Schema != nil:
			what = "schema and policy enforcement"
		case r.Config.Policy != nil:
			what = "policy " + r.Config.Policy.Name
		}
		fmt.Fprintf(&b, "%s: %s at %.3f× the throughput of %s; sequential publish p50 %+.1f µs, p99 %+.1f µs\n",
			what, TargetSemaq, sc.ThroughputRatio, TargetSemaqNoSchema, d.P50, d.P99)
	}
	if f := r.Floor; f != nil {
		fmt.Fprintf(&b, "the floor: %s is raw JetStream plus the one client hop of SemaQ's ingress, nothing else; %s at %.3f× its throughput is what SemaQ's own work costs beyond the hop\n",
			TargetJetStreamRelay, TargetSemaq, f.ThroughputRatio)
	}
	if err := r.writePaced(&b, width); err != nil {
		return err
	}
	if err := r.writeE2E(&b, width); err != nil {
		return err
	}
	for _, res := range r.Results {
		if gc := res.GroupCommit; gc != nil {
			fmt.Fprintf(&b, "%s group commit: %.1f acks per fsync in the throughput phase; whole run %d fsyncs, %d acks, %d failed, acks per fsync p50 %d p99 %d, fsync p50 %d µs p99 %d µs\n",
				res.Target, res.ThroughputAcksPerFsync, gc.Batches, gc.Acks, gc.Failures, gc.BatchSize.P50, gc.BatchSize.P99, gc.CommitLatency.P50, gc.CommitLatency.P99)
		}
	}
	if g := r.Goals; g != nil {
		if g.DurableThroughputMet != nil {
			fmt.Fprintf(&b, "goals: durable throughput ≥ %.0f× jetstream sync_always: %.1f× %s; p50 ≤ jetstream + %.0f µs: %+.1f µs %s\n",
				g.DurableThroughputRatioMin, g.ThroughputRatio, MetWord(*g.DurableThroughputMet), g.P50DeltaUSMax, g.P50DeltaUS, MetWord(g.P50Met))
		} else {
			what := "throughput"
			if c.Schema != nil {
				what = "throughput with " + c.Schema.Type + " schema enforcement"
			}
			fmt.Fprintf(&b, "goals: %s ≥ %.2f× jetstream: %.3f× %s; p50 ≤ jetstream + %.0f µs: %+.1f µs %s\n",
				what, g.ThroughputRatioMin, g.ThroughputRatio, MetWord(g.ThroughputMet), g.P50DeltaUSMax, g.P50DeltaUS, MetWord(g.P50Met))
		}
	}
	if g := r.Goals; g != nil && g.E2E != nil {
		b.WriteString(g.E2E.line())
	}
	if r.Ceiling != nil {
		b.WriteString(r.Ceiling.line())
	}
	if v := r.Validation; v != nil {
		fmt.Fprintf(&b, "goals: %s validation ≤ %.0f µs: %.2f µs %s\n", v.SchemaType, v.NSPerOpMax/1e3, v.NSPerOp/1e3, MetWord(v.Met))
	}
	for _, res := range r.Results {
		if res.FirstError != "" {
			fmt.Fprintf(&b, "%s: first error: %s\n", res.Target, res.FirstError)
		}
		for _, p := range res.Paced {
			if p.FirstError != "" {
				fmt.Fprintf(&b, "%s at %d msgs/s: first error: %s\n", res.Target, p.Rate, p.FirstError)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writePayload says what the messages carried and, with a schema, what
// validating one costs.
func (r *Report) writePayload(b *strings.Builder) {
	c := &r.Config
	if c.Payload != "" {
		how := "sent as is"
		if c.PayloadPadded {
			how = "longest string padded"
		}
		fmt.Fprintf(b, "  payload: %s, %d bytes, %s\n", c.Payload, c.Size, how)
	}
	if s := c.Schema; s != nil {
		wire := "plain JSON, validated against the subject's latest version"
		if s.ConfluentFramed {
			wire = "Confluent wire format (magic byte, schema id)"
		}
		fmt.Fprintf(b, "  schema: %s %s, registry subject %s, id %d; payloads in %s\n", s.Type, nameOr(s.File, "(given)"), s.Subject, s.ID, wire)
	}
	if v := r.Validation; v != nil {
		fmt.Fprintf(b, "  validation in process (schema.Validate on the %d bytes the ingress checks, one goroutine): %.0f ns/op, %.1f allocs/op, %.0f B/op, %d calls\n",
			v.PayloadBytes, v.NSPerOp, v.AllocsPerOp, v.BytesPerOp, v.Ops)
	}
}

// writePaced writes the paced phase: per rate, one line per target and the
// latency SemaQ adds, then what each rate that was not sustained means.
func (r *Report) writePaced(b *strings.Builder, width int) error {
	c := &r.Config
	if len(c.Rates) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\npaced: publish→ack latency at an offered rate (open loop, async, at most %d in flight), %s per rate per target\n", c.Window, c.Duration)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\toffered\tachieved\tp50 µs\tp99 µs\tp99.9 µs\tacked\tskipped\tlate\tacks/fsync\t\n", width, "target")
	var notes []string
	for _, rate := range c.Rates {
		for _, res := range r.Results {
			p := res.paced(rate)
			if p == nil {
				continue
			}
			perFsync := "–"
			if p.AcksPerFsync > 0 {
				perFsync = fmt.Sprintf("%.1f", p.AcksPerFsync)
			}
			fmt.Fprintf(tw, "%-*s\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t%s\t\n",
				width, res.Target, p.Rate, p.AchievedMsgsPerS, p.Latency.P50, p.Latency.P99, p.Latency.P999, p.Acked, p.Skipped, p.Late, perFsync)
			if !p.Sustained {
				queue := "∞"
				if p.AchievedMsgsPerS > 0 {
					queue = (time.Duration(float64(c.Window) / p.AchievedMsgsPerS * float64(time.Second))).Round(time.Millisecond).String()
				}
				notes = append(notes, fmt.Sprintf("%s did not sustain %d msgs/s (achieved %.0f; %d of %d offered skipped with the window full, %d unacknowledged): its latencies at this rate are queueing-dominated (%d in flight / %.0f msgs/s ≈ %s)",
					res.Target, p.Rate, p.AchievedMsgsPerS, p.Skipped, p.Offered, p.Unacked, c.Window, p.AchievedMsgsPerS, queue))
			}
		}
		for _, res := range r.Results {
			p := res.paced(rate)
			if p == nil || res.RatioVsJetStream == nil {
				continue
			}
			label := res.Target + " vs " + TargetJetStream
			if d := p.LatencyDeltaUS; d != nil {
				fmt.Fprintf(tw, "%-*s\t%d\tadded:\t%+.1f\t%+.1f\t%+.1f\t\t\t\t\t\n", width, label, p.Rate, d.P50, d.P99, d.P999)
			} else {
				fmt.Fprintf(tw, "%-*s\t%d\tadded:\t–\t–\t–\t\t\t\t\t\n", width, label, p.Rate)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(b, "  %s\n", n)
	}
	if len(r.Results) > 0 && len(r.Results[0].Paced) > 0 && r.Results[0].Paced[0].CPUPerMsgUS > 0 {
		b.WriteString("process CPU per paced message (whole process):")
		for _, res := range r.Results {
			at := make([]string, len(res.Paced))
			for i, p := range res.Paced {
				at[i] = fmt.Sprintf("%.1f µs at %d", p.CPUPerMsgUS, p.Rate)
			}
			fmt.Fprintf(b, " %s %s;", res.Target, strings.Join(at, ", "))
		}
		b.WriteString("\n")
	}
	return nil
}

// MetWord is how a report states a goal's outcome.
func MetWord(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
