package scenario

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/semaq/semaq/internal/bench"
)

// WriteHTML writes r as one self-contained HTML page: the table, the
// findings, and charts drawn as inline SVG (end-to-end latency CDF,
// throughput and lag over time, a heatmap of p99 per interval). It loads
// nothing from the network.
func (r *ScenarioReport) WriteHTML(w io.Writer) error {
	var table strings.Builder
	if err := r.WriteTable(&table); err != nil {
		return err
	}
	data := struct {
		R                             *ScenarioReport
		Table                         string
		CDF, Throughput, Lag, Heatmap template.HTML
		Legend                        template.HTML
	}{
		R:          r,
		Table:      table.String(),
		CDF:        r.cdfChart(),
		Throughput: r.seriesChart("completed msgs/s", func(p Point) float64 { return p.CompletedPerS }),
		Lag:        r.seriesChart("lag (messages)", func(p Point) float64 { return float64(p.Lag) }),
		Heatmap:    r.heatmap(),
		Legend:     r.legend(),
	}
	return htmlPage.Execute(w, data)
}

var htmlPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>semaq bench {{.R.Scenario}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}
h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.finding{border-left:4px solid #d62728;padding:.3em 1em;margin:.8em 0;background:#fff6f6}
.finding h3{margin:.2em 0;font-size:1em}
svg text{font-size:11px;fill:#333}
.legend span{display:inline-block;margin-right:1.5em}
.legend i{display:inline-block;width:1em;height:.6em;margin-right:.4em}
</style></head><body>
<h1>semaq bench: {{.R.Scenario}}</h1>
<p>{{.R.Config.Spec.Description}} — seed {{.R.Config.Spec.Seed}}, pattern {{.R.Config.Spec.Pattern}},
{{.R.Config.CPUs}} CPUs, {{.R.Config.GoVersion}}, nats-server {{.R.Config.NATSServer}}.</p>
<pre>{{.Table}}</pre>
<h2>Diagnosis</h2>
{{if not .R.Findings}}<p>No findings: no rule fired on what this run measured.</p>{{end}}
{{range .R.Findings}}<div class="finding"><h3>{{.Target}}: {{.RootCause}}</h3><ul>
{{range .Evidence}}<li>{{.}}</li>{{end}}</ul><p><b>Suggestion:</b> {{.Suggestion}}</p></div>{{end}}
<div class="legend">{{.Legend}}</div>
<h2>End-to-end latency distribution</h2>
{{.CDF}}
<h2>Throughput over time</h2>
{{.Throughput}}
<h2>Consumer lag over time</h2>
{{.Lag}}
<h2>p99 per interval</h2>
{{.Heatmap}}
</body></html>
`))

var targetColors = map[string]string{bench.TargetSemaq: "#1f77b4", bench.TargetJetStream: "#ff7f0e", TargetRabbitMQ: "#2ca02c", TargetRabbitMQQuorum: "#d62728"}

func colorOf(target string) string {
	if c, ok := targetColors[target]; ok {
		return c
	}
	return "#7f7f7f"
}

func esc(s string) string { return template.HTMLEscapeString(s) }

func (r *ScenarioReport) legend() template.HTML {
	var b strings.Builder
	for _, res := range r.Results {
		if res.Unreachable != "" {
			fmt.Fprintf(&b, `<span><i style="background:#ccc"></i>%s (%s)</span>`, esc(res.Target), esc(res.Unreachable))
			continue
		}
		fmt.Fprintf(&b, `<span><i style="background:%s"></i>%s</span>`, colorOf(res.Target), esc(res.Target))
	}
	return template.HTML(b.String())
}

// Chart geometry.
const (
	chartW, chartH = 900, 320
	padL, padR     = 70, 20
	padT, padB     = 15, 40
)

// nines maps a percentile to -log10(1-p): 90 → 1, 99 → 2, 99.9 → 3.
func nines(p float64) float64 {
	if p >= 100 {
		return 5
	}
	return math.Min(5, -math.Log10(1-p/100))
}

// cdfChart plots latency (log scale, y) against percentile (x in nines).
func (r *ScenarioReport) cdfChart() template.HTML {
	lo, hi := math.Inf(1), 0.0
	for _, res := range r.Results {
		for _, c := range res.CDF {
			if c.US > 0 {
				lo, hi = math.Min(lo, c.US), math.Max(hi, c.US)
			}
		}
	}
	if hi == 0 {
		return template.HTML("<p>No latency samples.</p>")
	}
	ylo, yhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if yhi == ylo {
		yhi++
	}
	xs := func(p float64) float64 { return padL + nines(p)/5*(chartW-padL-padR) }
	ys := func(us float64) float64 {
		return chartH - padB - (math.Log10(math.Max(us, lo))-ylo)/(yhi-ylo)*(chartH-padT-padB)
	}
	var b strings.Builder
	svgOpen(&b)
	for i, lbl := range []string{"0%", "90%", "99%", "99.9%", "99.99%", "100%"} {
		x := padL + float64(i)/5*(chartW-padL-padR)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x, padT, x, chartH-padB, x, chartH-padB+15, lbl)
	}
	for e := ylo; e <= yhi; e++ {
		y := ys(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`, padL, y, chartW-padR, y, padL-5, y+4, usLabel(math.Pow(10, e)))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">percentile</text>`, (chartW+padL)/2, chartH-5)
	for _, res := range r.Results {
		if len(res.CDF) == 0 {
			continue
		}
		var pts []string
		for _, c := range res.CDF {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs(c.Percentile), ys(c.US)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`, colorOf(res.Target), strings.Join(pts, " "), esc(res.Target))
	}
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// usLabel writes a latency in µs with its unit and three significant
// digits: 15.9 ms, not 15.876100000000001 ms.
func usLabel(us float64) string {
	switch {
	case us >= 1e6:
		return sig3(us/1e6) + " s"
	case us >= 1e3:
		return sig3(us/1e3) + " ms"
	}
	return sig3(us) + " µs"
}

// sig3 formats v with about three significant digits and no trailing
// zeros.
func sig3(v float64) string {
	decimals := 0
	switch a := math.Abs(v); {
	case a < 10:
		decimals = 2
	case a < 100:
		decimals = 1
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func svgOpen(b *strings.Builder) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`, padL, padT, chartW-padL-padR, chartH-padT-padB)
}

// seriesChart plots f of every target's series against time.
func (r *ScenarioReport) seriesChart(what string, f func(Point) float64) template.HTML {
	tmax, vmax := 0.0, 0.0
	for _, res := range r.Results {
		for _, p := range res.Series {
			tmax, vmax = math.Max(tmax, p.T), math.Max(vmax, f(p))
		}
	}
	if tmax == 0 {
		return template.HTML("<p>No time series.</p>")
	}
	if vmax == 0 {
		vmax = 1
	}
	vmax = niceCeil(vmax)
	xs := func(t float64) float64 { return padL + t/tmax*(chartW-padL-padR) }
	ys := func(v float64) float64 { return chartH - padB - v/vmax*(chartH-padT-padB) }
	var b strings.Builder
	svgOpen(&b)
	for i := 0; i <= 4; i++ {
		v := vmax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`, padL, ys(v), chartW-padR, ys(v), padL-5, ys(v)+4, compact(v))
		t := tmax * float64(i) / 4
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.1f s</text>`, xs(t), chartH-padB+15, t)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, (chartW+padL)/2, chartH-5, esc(what))
	for _, res := range r.Results {
		if len(res.Series) == 0 {
			continue
		}
		var pts []string
		for _, p := range res.Series {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xs(p.T), ys(f(p))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"><title>%s</title></polyline>`, colorOf(res.Target), strings.Join(pts, " "), esc(res.Target))
	}
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// heatmap draws one row per target, one cell per interval, coloured by
// the interval's p99 on a log scale shared by all rows.
func (r *ScenarioReport) heatmap() template.HTML {
	lo, hi, cols := math.Inf(1), 0.0, 0
	var rows []*ScenarioResult
	for i := range r.Results {
		res := &r.Results[i]
		if len(res.Series) == 0 {
			continue
		}
		rows = append(rows, res)
		cols = max(cols, len(res.Series))
		for _, p := range res.Series {
			if p.P99US > 0 {
				lo, hi = math.Min(lo, p.P99US), math.Max(hi, p.P99US)
			}
		}
	}
	if len(rows) == 0 || hi == 0 {
		return template.HTML("<p>No intervals.</p>")
	}
	const rowH, left = 28, 90
	cellW := float64(chartW-left-padR) / float64(cols)
	h := len(rows)*rowH + 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img">`, chartW, h, chartW, h)
	span := math.Log10(hi) - math.Log10(lo)
	for ri, res := range rows {
		y := ri * rowH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, left-6, y+rowH/2+4, esc(res.Target))
		for ci, p := range res.Series {
			fill := "#f0f0f0"
			if p.P99US > 0 {
				frac := 0.0
				if span > 0 {
					frac = (math.Log10(p.P99US) - math.Log10(lo)) / span
				}
				fill = heat(frac)
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s t=%.1f s p99 %s</title></rect>`,
				left+float64(ci)*cellW, y, math.Max(cellW-1, 1), rowH-2, fill, esc(res.Target), p.T, usLabel(p.P99US))
		}
	}
	y := len(rows)*rowH + 10
	for i := 0; i <= 10; i++ {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="20" height="12" fill="%s"/>`, left+i*20, y, heat(float64(i)/10))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text><text x="%d" y="%d" text-anchor="end">%s</text><text x="%d" y="%d">p99 per interval (log scale)</text>`,
		left, y+26, usLabel(math.Round(lo)), left+220, y+26, usLabel(math.Round(hi)), left+240, y+10)
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// heat maps 0..1 to a colour from pale yellow to dark red.
func heat(f float64) string {
	f = math.Max(0, math.Min(1, f))
	r := 255 - int(f*100)
	g := 240 - int(f*220)
	bl := 160 - int(f*140)
	return fmt.Sprintf("#%02x%02x%02x", r, g, bl)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*e {
			return m * e
		}
	}
	return 10 * e
}

func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
