package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/bench/measure"
)

// With E2E the paced phase also times every message to its receipt by a
// consumer of each stream, and the report compares the targets' p99.
func TestRunIngestE2E(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Rates = []int{500, 2000}
	cfg.Rounds = 2
	cfg.E2E = true
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Config.E2E {
		t.Error("config does not say the run measured end to end")
	}
	for _, name := range DefaultTargets {
		res := rep.Result(name)
		checkPaced(t, res, &cfg)
		for _, p := range res.Paced {
			e := p.E2E
			if e == nil {
				t.Fatalf("%s at %d msgs/s: no end-to-end result", name, p.Rate)
			}
			l := e.Latency
			switch {
			case e.Received < p.Acked || e.Received > p.Sent:
				t.Errorf("%s at %d msgs/s: received %d, want every one of the %d acknowledged (of %d sent)", name, p.Rate, e.Received, p.Acked, p.Sent)
			case e.Missing != p.Sent-e.Received:
				t.Errorf("%s at %d msgs/s: %d missing of %d sent, %d received", name, p.Rate, e.Missing, p.Sent, e.Received)
			case e.Redelivered != 0:
				t.Errorf("%s at %d msgs/s: %d redeliveries", name, p.Rate, e.Redelivered)
			case e.ReceivedMsgsPerS <= 0 || e.ReceivedMsgsPerS > float64(p.Rate):
				t.Errorf("%s at %d msgs/s: received %.1f msgs/s", name, p.Rate, e.ReceivedMsgsPerS)
			case l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 || l.Max < l.P999:
				t.Errorf("%s at %d msgs/s: end-to-end latency %+v, want 0 < p50 <= p99 <= p999 <= max", name, p.Rate, l)
			case e.Sustained != (p.Skipped+p.Errors+e.Missing <= p.Offered/100):
				t.Errorf("%s at %d msgs/s: sustained %v with %d skipped, %d failed, %d missing of %d", name, p.Rate, e.Sustained, p.Skipped, p.Errors, e.Missing, p.Offered)
			}
		}
	}
	s, raw := rep.Result(TargetSemaq), rep.Result(TargetJetStream)
	for i, p := range s.Paced {
		both := p.E2E.Sustained && raw.Paced[i].E2E.Sustained
		if got := p.E2E.P99RatioVsJetStream != nil && p.E2E.LatencyDeltaUS != nil; got != both {
			t.Errorf("semaq at %d msgs/s: p99 ratio given = %v, want %v (both sustained)", p.Rate, got, both)
		}
		if raw.Paced[i].E2E.P99RatioVsJetStream != nil {
			t.Errorf("the baseline at %d msgs/s is compared with itself", p.Rate)
		}
	}
	if rep.Goals == nil || rep.Goals.E2E != nil {
		t.Errorf("goals %+v: want no end-to-end goal without a rate of %d", rep.Goals, GoalE2ERate)
	}

	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Config  struct{ E2E bool } `json:"config"`
		Results []struct {
			Paced []struct {
				E2E *struct {
					Latency *struct {
						P50, P99, P999 *float64
					} `json:"latency_us"`
					Received  *int64   `json:"received"`
					PerS      *float64 `json:"received_msgs_per_s"`
					Missing   *int64   `json:"missing"`
					Sustained *bool    `json:"sustained"`
					Parts     *struct {
						Store   *struct{ P99 *float64 } `json:"publish_to_store"`
						Receipt *struct{ P99 *float64 } `json:"store_to_receipt"`
					} `json:"parts_us"`
				} `json:"e2e"`
			} `json:"paced"`
		} `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, buf.String())
	}
	if !doc.Config.E2E || len(doc.Results) != 2 {
		t.Fatalf("report JSON lacks config.e2e or results:\n%s", buf.String())
	}
	for _, r := range doc.Results {
		for _, p := range r.Paced {
			e := p.E2E
			if e == nil || e.Latency == nil || e.Latency.P50 == nil || e.Latency.P99 == nil || e.Latency.P999 == nil ||
				e.Received == nil || e.PerS == nil || e.Missing == nil || e.Sustained == nil ||
				e.Parts == nil || e.Parts.Store == nil || e.Parts.Store.P99 == nil || e.Parts.Receipt == nil || e.Parts.Receipt.P99 == nil {
				t.Fatalf("paced result lacks e2e.latency_us.p50/p99/p999, received, received_msgs_per_s, missing, sustained or parts_us:\n%s", buf.String())
			}
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	wants := []string{"end to end: publish → receipt by a pull consumer of the stream", "p99 ratio", "paced:", "where the end-to-end time went"}
	if _, ok := measure.CPUTime(); ok {
		wants = append(wants, "process CPU per paced message (whole process): semaq ")
		for _, res := range rep.Results {
			for _, p := range res.Paced {
				if p.CPUPerMsgUS <= 0 {
					t.Errorf("%s at %d msgs/s: CPU per message %.1f µs: not measured", res.Target, p.Rate, p.CPUPerMsgUS)
				}
			}
		}
	}
	for _, want := range wants {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// The reader times every message of its slice, through the ingress as
// straight into JetStream, takes no message sent before the slice or
// without a send time, never waits past its drain bound, and leaves no
// consumer behind.
func TestE2EReader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	for _, name := range DefaultTargets {
		t.Run(name, func(t *testing.T) {
			tgt := Targets[name]
			epoch := time.Now()
			rd, err := newE2EReader(ctx, r, tgt, epoch)
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					rd.close()
				}
			}()
			p, err := r.publisher(tgt, generatedBody(64), true, 16)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()

			// Sent before the slice opens, and one with no send time: stored
			// first, so received before the slice's own.
			early := &nats.Msg{Subject: p.msg.Subject, Header: stampSent(p.msg.Header, int64(time.Since(epoch))), Data: p.msg.Data}
			for _, m := range []*nats.Msg{early, p.msg} {
				if _, err := p.js.PublishMsg(ctx, m); err != nil {
					t.Fatal(err)
				}
			}

			pc, err := newPacer(p, 16)
			if err != nil {
				t.Fatal(err)
			}
			pc.stamp, pc.epoch = true, epoch
			h := newE2EHists()
			rd.begin(h)
			c, err := pc.run(ctx, 1000, 50*time.Millisecond, measure.NewHistogram())
			if err != nil {
				t.Fatal(err)
			}
			ec, err := rd.end(ctx, c.acked, 50*time.Millisecond, pacedDrainTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if c.acked == 0 || ec.received != c.acked || h.lat.Count() != ec.received || ec.redelivered != 0 {
				t.Errorf("acked %d, received %d, timed %d, redelivered %d: want every acknowledged message received and timed once",
					c.acked, ec.received, h.lat.Count(), ec.redelivered)
			}
			// Every message has a store time; only the ingress stamps AI-Received.
			wantIngress := int64(0)
			if tgt.Stream != "" {
				wantIngress = ec.received
			}
			if h.toStore.Count() != ec.received || h.toReceipt.Count() != ec.received || h.toIngress.Count() != wantIngress {
				t.Errorf("parts timed: to store %d, to receipt %d, to ingress %d; want %d, %d, %d",
					h.toStore.Count(), h.toReceipt.Count(), h.toIngress.Count(), ec.received, ec.received, wantIngress)
			}
			if got := rd.stale.Load(); got != 2 {
				t.Errorf("%d deliveries outside the slice, want 2 (one sent before it, one without a send time)", got)
			}
			if p.msg.Header.Get(hdrSent) != "" {
				t.Error("stamping changed the template message's header")
			}

			// A slice that is owed more than ever comes ends at its bound.
			rd.begin(newE2EHists())
			ec, err = rd.end(ctx, 5, 10*time.Millisecond, 50*time.Millisecond)
			if err != nil || ec.received != 0 {
				t.Errorf("end of an empty slice: %+v, %v; want nothing received and no error", ec, err)
			}

			consumer := rd.cons.CachedInfo().Name
			rd.close()
			closed = true
			if _, err := operatorJS(t, r).Consumer(ctx, rd.stream, consumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("consumer %s on %s after close: %v, want it deleted", consumer, rd.stream, err)
			}
		})
	}
}

func TestStampSent(t *testing.T) {
	t.Parallel()
	tmpl := nats.Header{"AI-Model": {"m"}}
	h := stampSent(tmpl, 12345)
	if got, err := strconv.ParseInt(h.Get(hdrSent), 10, 64); err != nil || got != 12345 || h.Get("AI-Model") != "m" {
		t.Errorf("stamped header %v: want %s 12345 beside the template's", h, hdrSent)
	}
	if len(tmpl) != 1 {
		t.Errorf("template changed: %v", tmpl)
	}
}

// SemaQ's end-to-end p99 is compared with the baseline's only where both
// sustained the rate; goal P3 is stated at GoalE2ERate.
func TestReportCompareE2E(t *testing.T) {
	t.Parallel()
	e2e := func(p99 float64, sustained bool) *E2EResult {
		return &E2EResult{Latency: measure.Latency{P50: p99 / 4, P99: p99, P999: 2 * p99}, Received: 100, Sustained: sustained}
	}
	mk := func(semaq99, raw99 float64, rawSustained bool) *Report {
		return &Report{
			Config: ReportConfig{Rates: []int{1000, GoalE2ERate}, E2E: true},
			Results: []Result{
				{Target: TargetSemaq, ThroughputMsgsPerS: 50000, Paced: []PacedResult{
					{Rate: 1000, Sustained: true, E2E: e2e(800, true)}, {Rate: GoalE2ERate, Sustained: true, E2E: e2e(semaq99, true)},
				}},
				{Target: TargetJetStream, ThroughputMsgsPerS: 60000, Paced: []PacedResult{
					{Rate: 1000, Sustained: true, E2E: e2e(400, true)}, {Rate: GoalE2ERate, Sustained: rawSustained, E2E: e2e(raw99, rawSustained)},
				}},
			},
		}
	}
	tests := []struct {
		name                string
		semaq99, raw99      float64
		rawSustained        bool
		wantRatio, wantLine string
	}{
		{"met", 1100, 1000, true, "1.1", "goals: end-to-end p99 at 10000 msgs/s ≤ 1.2× jetstream: 1.100× met"},
		{"missed", 1300, 1000, true, "1.3", "goals: end-to-end p99 at 10000 msgs/s ≤ 1.2× jetstream: 1.300× MISSED"},
		{"baseline short", 1300, 90000, false, "", "goals: end-to-end p99 at 10000 msgs/s ≤ 1.2× jetstream: not measurable: jetstream did not sustain the rate end to end"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep := mk(tt.semaq99, tt.raw99, tt.rawSustained)
			rep.compare()
			s := rep.Result(TargetSemaq)
			if r := s.Paced[0].E2E.P99RatioVsJetStream; r == nil || *r != 2 || s.Paced[0].E2E.LatencyDeltaUS.P99 != 400 {
				t.Errorf("at 1000 msgs/s: ratio %v, delta %+v; want 2× and +400 µs", r, s.Paced[0].E2E.LatencyDeltaUS)
			}
			r := s.Paced[1].E2E.P99RatioVsJetStream
			switch {
			case tt.wantRatio == "" && r != nil:
				t.Errorf("ratio %v over a baseline that did not keep up", *r)
			case tt.wantRatio != "" && (r == nil || strconv.FormatFloat(*r, 'f', -1, 64) != tt.wantRatio):
				t.Errorf("ratio %v, want %s", r, tt.wantRatio)
			}
			if g := rep.Goals; g == nil || g.E2E == nil || g.E2E.Rate != GoalE2ERate || (g.E2E.Met == nil) != (tt.wantRatio == "") {
				t.Fatalf("goals %+v", g)
			}
			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(table.String(), tt.wantLine) {
				t.Errorf("table lacks %q:\n%s", tt.wantLine, table.String())
			}
		})
	}
}
