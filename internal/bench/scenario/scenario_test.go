package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/bench"
)

// shortRun runs a scenario in short mode against targets, bounded.
func shortRun(t *testing.T, sc *Scenario, targets ...string) *ScenarioReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunScenario(ctx, ScenarioConfig{Scenario: sc, Targets: targets, Short: true, DataDir: t.TempDir(), RabbitMQURL: "amqp://guest:guest@127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestScenariosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: runs every shipped workload scenario end to end; runs without -short")
	}
	names := ScenarioNames()
	for _, want := range []string{"rag", "agent", "finetune", "rl-feedback", "tokens"} {
		if !contains(names, want) {
			t.Errorf("scenario %s is not shipped (have %v)", want, names)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			sc, err := LoadScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			rep := shortRun(t, sc, bench.TargetSemaq, bench.TargetJetStream)
			for _, target := range []string{bench.TargetSemaq, bench.TargetJetStream} {
				res := rep.Result(target)
				if res == nil || res.Unreachable != "" {
					t.Fatalf("%s: no result: %+v", target, res)
				}
				if res.ThroughputMsgsPerS <= 0 || res.LatencySamples == 0 {
					t.Errorf("%s: %.0f msgs/s from %d latency samples, want both > 0", target, res.ThroughputMsgsPerS, res.LatencySamples)
				}
				if l := res.Latency; l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 {
					t.Errorf("%s: latency %+v, want 0 < p50 <= p99 <= p99.9", target, l)
				}
				if res.Unfinished != 0 || res.Errors != 0 {
					t.Errorf("%s: %d unfinished, %d errors (first: %s)", target, res.Unfinished, res.Errors, res.FirstError)
				}
				if len(res.Series) < 2 {
					t.Errorf("%s: %d series points, want a few", target, len(res.Series))
				}
				for _, p := range res.Series {
					if p.Lag < 0 {
						t.Errorf("%s: lag %d at %.1f s; a backlog is never negative", target, p.Lag, p.T)
					}
				}
				if sc.Consumers == 1 && res.OutOfOrder != 0 {
					t.Errorf("%s: %d messages out of session order with one worker per stage", target, res.OutOfOrder)
				}
				if res.TraceBroken != 0 {
					t.Errorf("%s: %d messages lost their trace", target, res.TraceBroken)
				}
				if sc.Pattern == PatternTokens && res.CWPS <= 0 {
					t.Errorf("%s: CWPS %.3f for a token scenario", target, res.CWPS)
				}
			}
			// The seed fixes the arrivals: every target is offered the same messages.
			if sc.Rate > 0 {
				if a, b := rep.Result(bench.TargetSemaq).Published, rep.Result(bench.TargetJetStream).Published; a != b || a == 0 {
					t.Errorf("published %d on semaq, %d on jetstream: the same seed must offer the same load", a, b)
				}
			}
			if s := rep.Result(bench.TargetSemaq); s.RatioVsJetStream == nil || rep.Goals == nil || rep.Goals.P99VsJetStream == nil {
				t.Errorf("no comparison with jetstream: ratio %v goals %+v", s.RatioVsJetStream, rep.Goals)
			}
			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(table.String(), "semaq vs jetstream") {
				t.Errorf("table has no comparison line:\n%s", table.String())
			}
			var js bytes.Buffer
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var back map[string]any
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"scenario", "config", "results", "findings"} {
				if _, ok := back[k]; !ok {
					t.Errorf("JSON report has no %q", k)
				}
			}
		})
	}
}

// Completions may run ahead of the publishers' acks (RabbitMQ's classic
// queues confirm some messages only after their consumer acked them): the
// backlog is then empty, never negative.
func TestBacklog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ published, completed, want int64 }{
		{10, 4, 6}, {10, 10, 0}, {10, 13, 0}, {0, 0, 0},
	} {
		if got := backlog(tc.published, tc.completed); got != tc.want {
			t.Errorf("backlog(%d acked, %d completed) = %d, want %d", tc.published, tc.completed, got, tc.want)
		}
	}
}

// A seed fixes the offered load: the same scenario makes the same
// messages, another seed different ones.
func TestScenarioSeedReproducible(t *testing.T) {
	sc, err := LoadScenario("rag")
	if err != nil {
		t.Fatal(err)
	}
	draw := func(sc *Scenario) []string {
		g := newPayloadGen(sc, 0)
		rng := newPublisherRand(sc, 0)
		var out []string
		for i := range 20 {
			m := g.message(rng, i%3, int64(i), time.Unix(0, 0))
			out = append(out, string(m.data)+"|"+strings.Join(m.hdr, ","))
		}
		return out
	}
	a, b := draw(sc), draw(sc)
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Error("two draws with the same seed differ")
	}
	other := *sc
	other.Seed++
	if strings.Join(a, "\n") == strings.Join(draw(&other), "\n") {
		t.Error("another seed drew the same messages")
	}
	sizes := map[int]bool{}
	for _, m := range a {
		sizes[len(strings.SplitN(m, "|", 2)[0])] = true
	}
	if len(sizes) < 5 {
		t.Errorf("only %d distinct payload sizes in 20 messages drawn from %d..%d", len(sizes), sc.Payload.Min, sc.Payload.Max)
	}
}

// Both RabbitMQ targets, asked for together, report the same clear
// unreachable result, each naming itself in its hint; the other target is
// still measured.
func TestRabbitMQUnreachable(t *testing.T) {
	sc, err := LoadScenario("rl-feedback")
	if err != nil {
		t.Fatal(err)
	}
	rep := shortRun(t, sc, bench.TargetJetStream, TargetRabbitMQ, TargetRabbitMQQuorum)
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{TargetRabbitMQ, TargetRabbitMQQuorum} {
		res := rep.Result(target)
		if res == nil {
			t.Fatalf("no %s result", target)
		}
		if !strings.HasPrefix(res.Unreachable, "unreachable: ") || !strings.Contains(res.Unreachable, "127.0.0.1:1") {
			t.Errorf("%s: unreachable = %q, want it to say unreachable and where", target, res.Unreachable)
		}
		if n := strings.Count(res.Unreachable, "unreachable"); n != 1 {
			t.Errorf("%s: unreachable = %q says unreachable %d times, want once", target, res.Unreachable, n)
		}
		if !strings.Contains(res.Unreachable, "--rabbitmq-url") || !strings.Contains(res.Unreachable, "docker run") {
			t.Errorf("%s: unreachable = %q does not say how to get a server", target, res.Unreachable)
		}
		if !strings.Contains(res.Unreachable, "leave "+target+" out of --targets") {
			t.Errorf("%s: unreachable = %q does not name the target to leave out", target, res.Unreachable)
		}
		if strings.Contains(res.Unreachable, "guest:guest") {
			t.Errorf("%s: unreachable = %q shows the password", target, res.Unreachable)
		}
		if res.ThroughputMsgsPerS != 0 || res.Setup != "" {
			t.Errorf("%s: unreachable but measured: %.0f msgs/s, setup %q", target, res.ThroughputMsgsPerS, res.Setup)
		}
		if !strings.Contains(table.String(), "  "+target+": unreachable: ") {
			t.Errorf("table does not say %s was unreachable:\n%s", target, table.String())
		}
	}
	if js := rep.Result(bench.TargetJetStream); js == nil || js.ThroughputMsgsPerS <= 0 {
		t.Errorf("jetstream was not measured beside the unreachable targets: %+v", js)
	} else if js.RatioVsRabbitMQ != nil || js.RatioVsRabbitMQQuorum != nil {
		t.Errorf("jetstream has a ratio against an unmeasured target: %v, %v", js.RatioVsRabbitMQ, js.RatioVsRabbitMQQuorum)
	}
	if rep.Config.RabbitMQ != "amqp://guest:xxxxx@127.0.0.1:1/" {
		t.Errorf("config rabbitmq_url = %q, want the redacted URL", rep.Config.RabbitMQ)
	}
}

func TestScenarioConfigErrors(t *testing.T) {
	sc, err := LoadScenario("rag")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  ScenarioConfig
		want string
	}{
		{"no scenario", ScenarioConfig{Targets: []string{bench.TargetSemaq}}, "scenario: none given"},
		{"no targets", ScenarioConfig{Scenario: sc}, "targets: none given"},
		{"unknown target", ScenarioConfig{Scenario: sc, Targets: []string{"kafka"}}, `"kafka" is not a target`},
		{"twice", ScenarioConfig{Scenario: sc, Targets: []string{bench.TargetSemaq, bench.TargetSemaq}}, "given twice"},
		{"duration", ScenarioConfig{Scenario: sc, Targets: []string{bench.TargetSemaq}, Duration: 2 * bench.MaxDuration}, "duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RunScenario(context.Background(), tc.cfg)
			if !errors.Is(err, bench.ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrBadConfig naming %q", err, tc.want)
			}
		})
	}
}

// Rounds cut the measured time into slices in alternating target order;
// the report lays a target's slices end to end.
func TestScenarioRounds(t *testing.T) {
	sc, err := LoadScenario("rl-feedback")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := RunScenario(ctx, ScenarioConfig{Scenario: sc, Targets: []string{bench.TargetSemaq, bench.TargetJetStream}, Short: true, Rounds: 2, DataDir: t.TempDir(), Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Config.Rounds != 2 {
		t.Errorf("config rounds %d, want 2", rep.Config.Rounds)
	}
	// Round 2 runs the targets in the other order.
	order := regexp.MustCompile(`(?m)^(\w+): rl-feedback, round (\d)/2`).FindAllStringSubmatch(progress.String(), -1)
	var got []string
	for _, m := range order {
		got = append(got, m[1]+m[2])
	}
	if want := "semaq1 jetstream1 jetstream2 semaq2"; strings.Join(got, " ") != want {
		t.Errorf("run order %v, want %s", got, want)
	}
	for _, res := range rep.Results {
		if len(res.ByRound) != 2 {
			t.Errorf("%s: %d rounds of throughput, want 2", res.Target, len(res.ByRound))
		}
		rounds := map[int]bool{}
		for i, p := range res.Series {
			rounds[p.Round] = true
			if i > 0 && p.T <= res.Series[i-1].T {
				t.Errorf("%s: series time goes back at point %d: %v after %v", res.Target, i, p.T, res.Series[i-1].T)
			}
		}
		if !rounds[0] || !rounds[1] {
			t.Errorf("%s: series has points of rounds %v, want 0 and 1", res.Target, rounds)
		}
		if res.ThroughputMsgsPerS <= 0 || res.Unfinished != 0 {
			t.Errorf("%s: %.0f msgs/s, %d unfinished", res.Target, res.ThroughputMsgsPerS, res.Unfinished)
		}
	}
}

// cancelOn cancels when a line containing marker is written.
type cancelOn struct {
	marker string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

// A run interrupted in its second round reports the first, marked partial,
// with the interruption as its error.
func TestScenarioInterrupted(t *testing.T) {
	sc, err := LoadScenario("rl-feedback")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	interrupt, stop := context.WithCancel(ctx)
	defer stop()
	rep, err := RunScenario(interrupt, ScenarioConfig{Scenario: sc, Targets: []string{bench.TargetSemaq, bench.TargetJetStream}, Short: true, Rounds: 2,
		DataDir: t.TempDir(), Progress: cancelOn{"jetstream: rl-feedback, round 2/2", stop}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(fmt.Sprint(err), "interrupted in round 2 of 2") {
		t.Fatalf("error %v, want the interruption in round 2", err)
	}
	if rep == nil || !strings.Contains(rep.Interrupted, "round 2 of 2") {
		t.Fatalf("report %+v, want one marked interrupted", rep)
	}
	for _, res := range rep.Results {
		if res.Unreachable != "" || len(res.ByRound) != 1 || res.ThroughputMsgsPerS <= 0 {
			t.Errorf("%s: %q, %d rounds, %.0f msgs/s; want round 1's figures", res.Target, res.Unreachable, len(res.ByRound), res.ThroughputMsgsPerS)
		}
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil || !strings.Contains(table.String(), "PARTIAL: interrupted in round 2 of 2") {
		t.Fatalf("table %v:\n%s", err, table.String())
	}
}
