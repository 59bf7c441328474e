package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
)

func tinyConfig(t testing.TB) IngestConfig {
	cfg := DefaultIngestConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Warmup = 100 * time.Millisecond
	cfg.Size = 256
	cfg.Window = 64
	cfg.DataDir = t.TempDir()
	return cfg
}

func TestRunIngest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Rates = []int{500}
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Interval mode: one server, no fsync before acks, for both.
	checkSetup(t, rep, map[string]TargetSetup{
		TargetSemaq:     {Target: TargetSemaq, Server: ServerBroker, Stream: semaqStream, Durability: DurabilityInterval, IngressTransport: broker.IngressPipe},
		TargetJetStream: {Target: TargetJetStream, Server: ServerBroker, Stream: JetStreamStream, Durability: DurabilityInterval},
	})
	for _, name := range DefaultTargets {
		checkPaced(t, rep.Result(name), &cfg)
		if gc := rep.Result(name).GroupCommit; gc != nil {
			t.Errorf("%s: group-commit figures on an interval stream: %+v", name, gc)
		}
	}
	if rep.Goals == nil || rep.Goals.DurableThroughputMet != nil {
		t.Errorf("goals %+v: want the interval goals without the durable one", rep.Goals)
	}
	if rep.Scenario != ScenarioIngest {
		t.Errorf("scenario = %q, want %q", rep.Scenario, ScenarioIngest)
	}
	if got := len(rep.Results); got != 2 {
		t.Fatalf("got %d results, want 2", got)
	}
	for _, name := range DefaultTargets {
		res := rep.Result(name)
		if res == nil {
			t.Fatalf("no result for %s", name)
		}
		if res.ThroughputMsgsPerS <= 0 || res.Msgs <= 0 {
			t.Errorf("%s: throughput %.1f msgs/s from %d msgs, want > 0", name, res.ThroughputMsgsPerS, res.Msgs)
		}
		l := res.Latency
		if l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 || l.Max < l.P999 {
			t.Errorf("%s: latency %+v, want 0 < p50 <= p99 <= p999 <= max", name, l)
		}
		if len(res.ByRound) != cfg.Rounds {
			t.Errorf("%s: %d throughput rounds, want %d", name, len(res.ByRound), cfg.Rounds)
		}
		if res.LatencySamples <= 0 {
			t.Errorf("%s: %d latency samples", name, res.LatencySamples)
		}
		if res.Errors != 0 {
			t.Errorf("%s: %d errors, first: %s", name, res.Errors, res.FirstError)
		}
		if _, ok := measure.CPUTime(); ok && (res.ThroughputCPUCores <= 0 || res.ThroughputCPUPerMsgUS <= 0) {
			t.Errorf("%s: throughput phase used %.2f cores, %.1f µs/msg: the CPU was not measured", name, res.ThroughputCPUCores, res.ThroughputCPUPerMsgUS)
		}
	}
	semaq := rep.Result(TargetSemaq)
	if semaq.RatioVsJetStream == nil || *semaq.RatioVsJetStream <= 0 || semaq.LatencyDeltaUS == nil {
		t.Errorf("semaq result has no comparison with jetstream: %+v", semaq)
	}
	if rep.Result(TargetJetStream).RatioVsJetStream != nil {
		t.Error("the baseline is compared with itself")
	}
	if rep.Goals == nil {
		t.Error("no goals in a report with both targets")
	}
	for _, step := range []string{"warming up semaq", "throughput jetstream: round 2/4", "latency semaq: round 1/4", "paced jetstream: 500 msgs/s, round 4/4"} {
		if !strings.Contains(progress.String(), step) {
			t.Errorf("progress lacks %q:\n%s", step, progress.String())
		}
	}

	// The JSON shape other tools read.
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Target     *string  `json:"target"`
			Throughput *float64 `json:"throughput_msgs_per_s"`
			Latency    *struct {
				P50  *float64 `json:"p50"`
				P99  *float64 `json:"p99"`
				P999 *float64 `json:"p999"`
			} `json:"latency_us"`
		} `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, buf.String())
	}
	if doc.Scenario != "ingest" || len(doc.Results) != 2 {
		t.Fatalf("report JSON: scenario %q with %d results:\n%s", doc.Scenario, len(doc.Results), buf.String())
	}
	for i, r := range doc.Results {
		if r.Target == nil || r.Throughput == nil || r.Latency == nil || r.Latency.P50 == nil || r.Latency.P99 == nil || r.Latency.P999 == nil {
			t.Errorf("result %d lacks target, throughput_msgs_per_s or latency_us.p50/p99/p999:\n%s", i, buf.String())
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	wants := []string{"semaq", "jetstream", "semaq vs jetstream", "goals: throughput ≥ 0.85×", "paced:", "jetstream on the broker's nats-server (JetStream sync_always false)"}
	if _, ok := measure.CPUTime(); ok {
		wants = append(wants, "process CPU in the throughput phase (of ")
	}
	for _, want := range wants {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// Sync always: SemaQ's group-committed fsync stream against raw JetStream
// on its own server with sync_always, with the paced phase by default
// rates.
func TestRunIngestDurable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Sync = broker.SyncAlways
	cfg.Rates = DefaultRates
	cfg.Rounds = 2
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkSetup(t, rep, map[string]TargetSetup{
		TargetSemaq:     {Target: TargetSemaq, Server: ServerBroker, Stream: semaqStream, Durability: DurabilityFsync, IngressTransport: broker.IngressPipe},
		TargetJetStream: {Target: TargetJetStream, Server: ServerRaw, Stream: JetStreamStream, JetStreamSyncAlways: true, Durability: DurabilitySyncAlways},
	})
	if !slices.Equal(rep.Config.Rates, DefaultRates) {
		t.Errorf("config rates %v, want %v", rep.Config.Rates, DefaultRates)
	}
	for _, name := range DefaultTargets {
		res := rep.Result(name)
		if res == nil {
			t.Fatalf("no result for %s", name)
		}
		if res.ThroughputMsgsPerS <= 0 || res.Latency.P50 <= 0 || res.Errors != 0 {
			t.Errorf("%s: throughput %.1f, latency %+v, %d errors (%s)", name, res.ThroughputMsgsPerS, res.Latency, res.Errors, res.FirstError)
		}
		checkPaced(t, res, &cfg)
	}

	s, raw := rep.Result(TargetSemaq), rep.Result(TargetJetStream)
	gc := s.GroupCommit
	if gc == nil || gc.Batches == 0 || gc.Acks < uint64(s.Msgs) || gc.Failures != 0 || gc.BatchSize.Max < 1 {
		t.Errorf("semaq group commit %+v, want every ack of the run committed without failure", gc)
	}
	if s.ThroughputAcksPerFsync < 1 {
		t.Errorf("semaq: %.1f acks per fsync in the throughput phase", s.ThroughputAcksPerFsync)
	}
	for _, p := range s.Paced {
		if p.Fsyncs == 0 || p.AcksPerFsync < 1 {
			t.Errorf("semaq at %d msgs/s: %d fsyncs, %.1f acks per fsync", p.Rate, p.Fsyncs, p.AcksPerFsync)
		}
	}
	if raw.GroupCommit != nil || raw.ThroughputAcksPerFsync != 0 {
		t.Errorf("raw jetstream has group-commit figures: %+v", raw.GroupCommit)
	}
	g := rep.Goals
	if g == nil || g.DurableThroughputMet == nil || g.DurableThroughputRatioMin != GoalDurableThroughputRatio || g.ThroughputRatio != *s.RatioVsJetStream {
		t.Errorf("goals %+v: want the durable goal on the semaq/jetstream ratio", g)
	}

	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config struct {
			Setup []struct {
				Target     string `json:"target"`
				Server     string `json:"server"`
				SyncAlways *bool  `json:"jetstream_sync_always"`
			} `json:"setup"`
		} `json:"config"`
		Results []struct {
			Target string `json:"target"`
			Paced  []struct {
				Rate     *int     `json:"rate"`
				Achieved *float64 `json:"achieved_msgs_per_s"`
				Latency  *struct {
					P50  *float64 `json:"p50"`
					P99  *float64 `json:"p99"`
					P999 *float64 `json:"p999"`
				} `json:"latency_us"`
			} `json:"paced"`
		} `json:"results"`
		Goals struct {
			Met *bool `json:"durable_throughput_met"`
		} `json:"goals"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, buf.String())
	}
	if doc.Goals.Met == nil || len(doc.Config.Setup) != 2 {
		t.Errorf("report JSON lacks goals.durable_throughput_met or config.setup:\n%s", buf.String())
	}
	for _, s := range doc.Config.Setup {
		if s.SyncAlways == nil || *s.SyncAlways != (s.Target == TargetJetStream) {
			t.Errorf("config.setup %+v: want jetstream_sync_always on the raw target only", s)
		}
	}
	for _, r := range doc.Results {
		if len(r.Paced) != len(DefaultRates) {
			t.Fatalf("%s: %d paced results in JSON, want %d:\n%s", r.Target, len(r.Paced), len(DefaultRates), buf.String())
		}
		for _, p := range r.Paced {
			if p.Rate == nil || p.Achieved == nil || p.Latency == nil || p.Latency.P50 == nil || p.Latency.P99 == nil || p.Latency.P999 == nil {
				t.Errorf("%s: paced result lacks rate, achieved_msgs_per_s or latency_us.p50/p99/p999:\n%s", r.Target, buf.String())
			}
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"jetstream on its own nats-server (JetStream sync_always true), stream BENCH_RAW, fsync per message",
		"semaq on the broker's nats-server (JetStream sync_always false), stream BENCH_SEMAQ, durability fsync",
		"paced:", "added:", "semaq group commit:", "goals: durable throughput ≥ 10× jetstream sync_always",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// checkSetup compares the report's setup with want, by target.
func checkSetup(t *testing.T, rep *Report, want map[string]TargetSetup) {
	t.Helper()
	if len(rep.Config.Setup) != len(want) {
		t.Fatalf("setup %+v, want %d targets", rep.Config.Setup, len(want))
	}
	for _, got := range rep.Config.Setup {
		if got != want[got.Target] {
			t.Errorf("setup of %s = %+v, want %+v", got.Target, got, want[got.Target])
		}
	}
}

// checkPaced checks that res has a sane paced result for every rate of cfg.
func checkPaced(t *testing.T, res *Result, cfg *IngestConfig) {
	t.Helper()
	if len(res.Paced) != len(cfg.Rates) {
		t.Fatalf("%s: %d paced results, want %d", res.Target, len(res.Paced), len(cfg.Rates))
	}
	slice := cfg.Duration / time.Duration(cfg.Rounds)
	for i, p := range res.Paced {
		offered := int64(cfg.Rounds) * (int64(p.Rate) * int64(slice) / int64(time.Second))
		l := p.Latency
		switch {
		case p.Rate != cfg.Rates[i]:
			t.Errorf("%s: paced result %d is at %d msgs/s, want %d", res.Target, i, p.Rate, cfg.Rates[i])
		case p.Offered != offered:
			t.Errorf("%s at %d msgs/s: offered %d, want %d", res.Target, p.Rate, p.Offered, offered)
		case p.Errors != 0:
			t.Errorf("%s at %d msgs/s: %d errors, first: %s", res.Target, p.Rate, p.Errors, p.FirstError)
		case p.Sent+p.Skipped != p.Offered || p.Acked+p.Unacked != p.Sent || p.Acked <= 0:
			t.Errorf("%s at %d msgs/s: offered %d, sent %d, skipped %d, acked %d, unacked %d: counts do not add up", res.Target, p.Rate, p.Offered, p.Sent, p.Skipped, p.Acked, p.Unacked)
		case p.Late > p.Sent:
			t.Errorf("%s at %d msgs/s: %d late of %d sent", res.Target, p.Rate, p.Late, p.Sent)
		case p.AchievedMsgsPerS <= 0 || p.AchievedMsgsPerS > float64(p.Rate):
			t.Errorf("%s at %d msgs/s: achieved %.1f msgs/s", res.Target, p.Rate, p.AchievedMsgsPerS)
		case l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 || l.Max < l.P999:
			t.Errorf("%s at %d msgs/s: latency %+v, want 0 < p50 <= p99 <= p999 <= max", res.Target, p.Rate, l)
		case p.Sustained != (p.Skipped+p.Unacked <= p.Offered/100):
			t.Errorf("%s at %d msgs/s: sustained %v with %d skipped and %d unacked of %d", res.Target, p.Rate, p.Sustained, p.Skipped, p.Unacked, p.Offered)
		}
		if res.Target == TargetJetStream && p.LatencyDeltaUS != nil {
			t.Errorf("the baseline at %d msgs/s is compared with itself", p.Rate)
		}
	}
}

// The pacer never lets more than its window into flight and never waits
// longer than its drain bound for acks that do not come.
func TestPacerBoundsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	// A subscriber that never replies: every publish stays in flight.
	nc, err := nats.Connect(r.Broker.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("bench.blackhole", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	hole := &Target{Name: "blackhole", subject: "bench.blackhole", Dial: Targets[TargetSemaq].Dial}
	p, err := r.publisher(hole, generatedBody(10), false, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	pc, err := newPacer(p, 8)
	if err != nil {
		t.Fatal(err)
	}
	pc.drain = 50 * time.Millisecond
	h := measure.NewHistogram()
	c, err := pc.run(ctx, 1000, 100*time.Millisecond, h)
	if err != nil {
		t.Fatal(err)
	}
	if c.offered != 100 || c.sent != 8 || c.skipped != 92 || c.unacked != 8 || c.acked != 0 || h.Count() != 0 {
		t.Errorf("offered %d, sent %d, skipped %d, unacked %d, acked %d, %d latencies; want 100, 8, 92, 8, 0, 0",
			c.offered, c.sent, c.skipped, c.unacked, c.acked, h.Count())
	}
	res := (&pacedRun{rate: 1000, lat: h, counts: c}).result()
	if res.Sustained || res.Skipped != 92 {
		t.Errorf("result %+v: want not sustained", res)
	}
}

// Added latency is only stated where the baseline kept up; the durable goal
// only when SemaQ's fsync stream ran against sync_always.
func TestReportCompare(t *testing.T) {
	t.Parallel()
	lat := func(p50 float64) measure.Latency { return measure.Latency{P50: p50, P99: 2 * p50, P999: 3 * p50} }
	mk := func(semaqDur, rawDur string) *Report {
		return &Report{
			Config: ReportConfig{Rates: []int{1000, 10000}, Setup: []TargetSetup{
				{Target: TargetSemaq, Durability: semaqDur}, {Target: TargetJetStream, Durability: rawDur},
			}},
			Results: []Result{
				{Target: TargetSemaq, ThroughputMsgsPerS: 50000, Latency: lat(500), Paced: []PacedResult{
					{Rate: 1000, Sustained: true, Latency: lat(900)}, {Rate: 10000, Sustained: true, Latency: lat(1200)},
				}},
				{Target: TargetJetStream, ThroughputMsgsPerS: 4000, Latency: lat(400), Paced: []PacedResult{
					{Rate: 1000, Sustained: true, Latency: lat(450)}, {Rate: 10000, Sustained: false, Latency: lat(70000)},
				}},
			},
		}
	}
	rep := mk(DurabilityFsync, DurabilitySyncAlways)
	rep.compare()
	s := rep.Result(TargetSemaq)
	if d := s.Paced[0].LatencyDeltaUS; d == nil || d.P50 != 450 || d.P99 != 900 {
		t.Errorf("added latency at 1000 msgs/s = %+v, want p50 +450, p99 +900", d)
	}
	if d := s.Paced[1].LatencyDeltaUS; d != nil {
		t.Errorf("added latency over a baseline that did not keep up: %+v", d)
	}
	g := rep.Goals
	if g == nil || g.ThroughputRatio != 12.5 || g.DurableThroughputMet == nil || !*g.DurableThroughputMet {
		t.Errorf("goals %+v: want the durable goal met at 12.5×", g)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jetstream did not sustain 10000 msgs/s", "queueing-dominated", "durable throughput ≥ 10× jetstream sync_always: 12.5× met"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}

	rep = mk(DurabilityInterval, DurabilityInterval)
	rep.compare()
	if rep.Goals == nil || rep.Goals.DurableThroughputMet != nil {
		t.Errorf("interval run has the durable goal: %+v", rep.Goals)
	}
}

// The ceiling's ratios come from the same run's targets, and the table
// says when the disk leaves the durable goal out of reach.
func TestReportCeiling(t *testing.T) {
	t.Parallel()
	mk := func(semaq, raw, semaqInt, rawInt float64) *Report {
		rep := &Report{Results: []Result{
			{Target: TargetSemaq, ThroughputMsgsPerS: semaq}, {Target: TargetJetStream, ThroughputMsgsPerS: raw},
			{Target: TargetSemaqInterval, ThroughputMsgsPerS: semaqInt}, {Target: TargetJetStreamInterval, ThroughputMsgsPerS: rawInt},
		}}
		rep.compare()
		return rep
	}
	rep := mk(19000, 3700, 35500, 52900)
	c := rep.Ceiling
	if c == nil || c.DiskRatio == nil || *c.DiskRatio != 14.297 || c.GroupCommitEfficiency == nil || *c.GroupCommitEfficiency != 0.535 ||
		c.IntervalRatio == nil || *c.IntervalRatio != 0.671 || !*c.DurableGoalReachable || *c.GroupCommitEfficiencyMet {
		t.Fatalf("ceiling %+v: want disk 14.297 (goal reachable), efficiency 0.535 (missed), interval 0.671", c)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jetstream-interval over jetstream sync_always 14.30×", "semaq fsync over semaq-interval 0.535 (≥ 0.80 MISSED)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"disk_ratio": 14.297`) || !strings.Contains(js.String(), `"group_commit_efficiency": 0.535`) {
		t.Errorf("JSON lacks the ceiling:\n%s", js.String())
	}

	rep = mk(40000, 5000, 42000, 45000)
	if c := rep.Ceiling; c == nil || *c.DurableGoalReachable || !*c.GroupCommitEfficiencyMet {
		t.Errorf("ceiling %+v: want the goal out of reach at 9×, efficiency met", c)
	}
	var low bytes.Buffer
	if err := rep.WriteTable(&low); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(low.String(), "no group commit can meet it here") {
		t.Errorf("table does not say the goal is out of reach:\n%s", low.String())
	}

	rep = &Report{Results: []Result{{Target: TargetSemaq, ThroughputMsgsPerS: 1}, {Target: TargetJetStream, ThroughputMsgsPerS: 1}}}
	rep.compare()
	if rep.Ceiling != nil {
		t.Errorf("a run without the ceiling's targets has one: %+v", rep.Ceiling)
	}
}

// The ceiling's targets store where they say: the raw one on the broker,
// whose JetStream does not fsync each message, the SemaQ one with
// durability interval, neither through the group commit.
func TestRunIngestCeiling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Targets = CeilingTargets
	cfg.Rounds = 1
	cfg.Sync = broker.SyncAlways
	// Each target's consumer reads its own stream.
	cfg.Rates, cfg.E2E = []int{200}, true
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		TargetSemaq: DurabilityFsync, TargetJetStream: DurabilitySyncAlways,
		TargetSemaqInterval: DurabilityInterval, TargetJetStreamInterval: DurabilityInterval,
	}
	for _, s := range rep.Config.Setup {
		if s.Durability != want[s.Target] {
			t.Errorf("%s: durability %q, want %q", s.Target, s.Durability, want[s.Target])
		}
		if s.Target == TargetJetStreamInterval && (s.Server != ServerBroker || s.JetStreamSyncAlways) {
			t.Errorf("%s runs on %s with sync_always %v, want the broker without", s.Target, s.Server, s.JetStreamSyncAlways)
		}
	}
	for _, name := range CeilingTargets {
		res := rep.Result(name)
		if res == nil || res.Msgs <= 0 {
			t.Fatalf("%s: nothing measured: %+v", name, res)
		}
		if len(res.Paced) != 1 || res.Paced[0].E2E == nil || res.Paced[0].E2E.Received <= 0 {
			t.Errorf("%s: paced %+v: want its consumer to receive", name, res.Paced)
		}
		if (res.GroupCommit != nil) != (name == TargetSemaq) {
			t.Errorf("%s: group commit figures %+v", name, res.GroupCommit)
		}
	}
	if c := rep.Ceiling; c == nil || c.DiskRatio == nil || c.GroupCommitEfficiency == nil || c.IntervalRatio == nil {
		t.Errorf("ceiling %+v: want every ratio", c)
	}
}

func TestRunIngestOneTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Targets = []string{TargetSemaq}
	cfg.Rounds = 1
	cfg.Publishers = 2
	cfg.Sync = broker.SyncAlways
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Target != TargetSemaq {
		t.Fatalf("results %+v, want semaq only", rep.Results)
	}
	if rep.Goals != nil || rep.Results[0].RatioVsJetStream != nil {
		t.Error("a report without the baseline has a comparison")
	}
	if rep.Results[0].Msgs <= 0 || rep.Results[0].Latency.P50 <= 0 {
		t.Errorf("nothing measured: %+v", rep.Results[0])
	}
}

func TestRunIngestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Duration = time.Hour
	cfg.Warmup = 0
	started := &watchWriter{want: "throughput", seen: make(chan struct{})}
	cfg.Progress = started
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-started.seen: // cancel once the measurement has begun
			cancel()
		case <-done:
		}
	}()
	_, err := RunIngest(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// watchWriter closes seen when a line containing want is written.
type watchWriter struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.want)) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func TestRunIngestDirtyDataDir(t *testing.T) {
	t.Parallel()
	cfg := tinyConfig(t)
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "old"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := RunIngest(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("err = %v, want a refusal of the non-empty data directory", err)
	}
}

func TestIngestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*IngestConfig)
		wants string // in the error; "" for valid
	}{
		{"default", func(*IngestConfig) {}, ""},
		{"one target", func(c *IngestConfig) { c.Targets = []string{"jetstream"} }, ""},
		{"unknown target", func(c *IngestConfig) { c.Targets = []string{"semaq", "rabbitmq"} }, `targets: "rabbitmq" is not a target`},
		{"no targets", func(c *IngestConfig) { c.Targets = nil }, "targets: none given"},
		{"twice", func(c *IngestConfig) { c.Targets = []string{"semaq", "semaq"} }, `"semaq" is given twice`},
		{"noschema without schema", func(c *IngestConfig) { c.Targets = SchemaTargets }, `"semaq-noschema" is the comparison for a run with a schema`},
		{"ceiling", func(c *IngestConfig) { c.Targets, c.Sync = CeilingTargets, broker.SyncAlways }, ""},
		{"ceiling with sync interval", func(c *IngestConfig) { c.Targets = []string{"jetstream-interval"} }, `"jetstream-interval" is the no-fsync comparison for a run with sync always`},
		{"relay", func(c *IngestConfig) { c.Targets = []string{"semaq", "jetstream-relay", "jetstream"} }, ""},
		{"relay with sync always", func(c *IngestConfig) { c.Targets, c.Sync = []string{"jetstream-relay"}, broker.SyncAlways }, `"jetstream-relay" stores like a SemaQ stream only with sync interval`},
		{"semaq-interval with sync interval", func(c *IngestConfig) { c.Targets = []string{"semaq", "semaq-interval"} }, `"semaq-interval" is the no-fsync comparison`},
		{"schema", func(c *IngestConfig) {
			c.Targets, c.Payload = SchemaTargets, []byte(`{}`)
			c.Schema = &SchemaConfig{Type: "JSON", Text: `{}`}
		}, ""},
		{"schema type", func(c *IngestConfig) { c.Payload, c.Schema = []byte(`{}`), &SchemaConfig{Type: "json", Text: `{}`} }, `schema: type "json" is not one of`},
		{"schema empty", func(c *IngestConfig) {
			c.Payload, c.Schema = []byte(`{}`), &SchemaConfig{Type: "AVRO", Text: " ", File: "x.avsc"}
		}, "schema: x.avsc is empty"},
		{"schema without payload", func(c *IngestConfig) { c.Schema = &SchemaConfig{Type: "JSON", Text: `{}`} }, "payload: a schema needs a sample payload"},
		{"empty payload", func(c *IngestConfig) { c.Payload, c.PayloadFile = []byte("\n"), "p.json" }, "payload: p.json is empty"},
		{"zero duration", func(c *IngestConfig) { c.Duration = 0 }, "duration: 0s"},
		{"negative warmup", func(c *IngestConfig) { c.Warmup = -time.Second }, "warmup: -1s"},
		{"huge size", func(c *IngestConfig) { c.Size = 2 << 20 }, "size: 2097152 bytes"},
		{"bad sync", func(c *IngestConfig) { c.Sync = "never" }, `sync: "never" is not a sync mode`},
		{"zero window", func(c *IngestConfig) { c.Window = 0 }, "window: 0"},
		{"zero publishers", func(c *IngestConfig) { c.Publishers = 0 }, "publishers: 0"},
		{"zero rounds", func(c *IngestConfig) { c.Rounds = 0 }, "rounds: 0"},
		{"rounds too short", func(c *IngestConfig) { c.Duration, c.Rounds = 10*time.Millisecond, 20 }, "under a millisecond"},
		{"rates", func(c *IngestConfig) { c.Rates = []int{1000, 10000} }, ""},
		{"zero rate", func(c *IngestConfig) { c.Rates = []int{0} }, "rates: 0 msgs/s is outside"},
		{"huge rate", func(c *IngestConfig) { c.Rates = []int{MaxRate + 1} }, "rates: 1000001 msgs/s"},
		{"rate twice", func(c *IngestConfig) { c.Rates = []int{10, 10} }, "rates: 10 is given twice"},
		{"too many rates", func(c *IngestConfig) { c.Rates = make([]int, MaxRates+1) }, "at most 16"},
		{"e2e", func(c *IngestConfig) { c.E2E, c.Rates = true, []int{1000} }, ""},
		{"e2e without rates", func(c *IngestConfig) { c.E2E = true }, "e2e: the end-to-end latency is measured in the paced phase; give one or more rates"},
		{"routes", func(c *IngestConfig) { c.Routes = 10 }, ""},
		{"too many routes", func(c *IngestConfig) { c.Routes = MaxRoutes + 1 }, "routes: 101 is outside 0..100"},
		{"negative routes", func(c *IngestConfig) { c.Routes = -1 }, "routes: -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultIngestConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wants == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wants != "" && (err == nil || !strings.Contains(err.Error(), tt.wants) || !errors.Is(err, ErrBadConfig)):
				t.Fatalf("err = %v, want ErrBadConfig containing %q", err, tt.wants)
			}
		})
	}
}

func TestGeneratedBody(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 97, 1024, 100_000} {
		if b := generatedBody(size); len(b) != size {
			t.Errorf("size %d: got %d bytes", size, len(b))
		}
	}
}

func TestInOrder(t *testing.T) {
	t.Parallel()
	a, b := &run{t: Targets[TargetSemaq]}, &run{t: Targets[TargetJetStream]}
	runs := []*run{a, b}
	if got := inOrder(runs, 0); !slices.Equal(got, []*run{a, b}) {
		t.Error("round 0 not in given order")
	}
	if got := inOrder(runs, 1); !slices.Equal(got, []*run{b, a}) {
		t.Error("round 1 not reversed")
	}
	if !slices.Equal(runs, []*run{a, b}) {
		t.Error("inOrder changed its argument")
	}
}
