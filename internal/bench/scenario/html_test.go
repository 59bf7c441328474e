package scenario

import (
	"bytes"
	"encoding/xml"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
)

func TestWriteHTML(t *testing.T) {
	sc := baseScenario()
	sc.Name, sc.Description = "demo", `a <scenario> & "quotes"`
	rep := newScenarioReport(sc, ScenarioConfig{Targets: []string{bench.TargetSemaq, bench.TargetJetStream, TargetRabbitMQ}, RabbitMQURL: "amqp://u:secret@h:5672/"})
	mk := func(target string, p99 float64) ScenarioResult {
		res := healthy()
		res.Target = target
		res.Setup = target + " <setup>"
		res.Series[4].P99US = p99
		res.Series[7].P99US = 15876.100000000001
		h := measure.NewHistogram()
		for i := range 1000 {
			h.Record(time.Duration(100+i) * time.Microsecond)
		}
		res.CDF = cdfOf(h)
		return *res
	}
	rep.Results = []ScenarioResult{mk(bench.TargetSemaq, 5000), mk(bench.TargetJetStream, 900),
		{Result: bench.Result{Target: TargetRabbitMQ}, Unreachable: "unreachable: <dial refused>"}}
	rep.Results[0].Redeliveries = 3 // one finding
	rep.finish()
	if len(rep.Findings) != 1 {
		t.Fatalf("findings %+v, want one", rep.Findings)
	}
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		"<!DOCTYPE html>", "End-to-end latency distribution", "Throughput over time", "p99 per interval",
		"<polyline", "ack wait too short", "a &lt;scenario&gt; &amp; &#34;quotes&#34;", "unreachable: &lt;dial refused&gt;",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page has no %q", want)
		}
	}
	if strings.Contains(page, "secret") {
		t.Error("page shows the RabbitMQ password")
	}
	// Self-contained: nothing is fetched.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`).FindString(page); m != "" {
		t.Errorf("page loads %s", m)
	}
	// Each chart is well-formed SVG with one line per measured target.
	svgs := regexp.MustCompile(`(?s)<svg.*?</svg>`).FindAllString(page, -1)
	if len(svgs) != 4 {
		t.Fatalf("%d charts, want 4 (CDF, throughput, lag, heatmap)", len(svgs))
	}
	for i, s := range svgs {
		if err := xml.Unmarshal([]byte(s), new(struct{})); err != nil {
			t.Errorf("chart %d is not well-formed: %v", i, err)
		}
	}
	if n := strings.Count(svgs[0], "<polyline"); n != 2 {
		t.Errorf("CDF has %d lines, want 2", n)
	}
	// Tooltips and labels carry rounded numbers, not float noise.
	if m := regexp.MustCompile(`\d+\.\d{4,} ?(s|ms|µs)\b`).FindString(page); m != "" {
		t.Errorf("page shows an unrounded number: %s", m)
	}
	if !strings.Contains(svgs[3], "semaq t=0.8 s p99 15.9 ms") {
		t.Errorf("heatmap has no rounded cell for semaq's 15.8761 ms interval")
	}
	// The heatmap has a cell for semaq's 5 ms interval.
	if !strings.Contains(svgs[3], "semaq t=0.5 s p99 5 ms") {
		t.Errorf("heatmap has no cell for semaq's 5 ms interval")
	}
}
