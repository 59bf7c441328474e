package semaq

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestParseCanaryPercent(t *testing.T) {
	for in, want := range map[string]float64{"10%": 10, "10": 10, " 2.5% ": 2.5, "99.99%": 99.99} {
		if got, err := ParseCanaryPercent(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "%", "0%", "100%", "-5%", "NaN", "Inf%", "1e1", "0x10", "10%%", "10 %", "1_0"} {
		if got, err := ParseCanaryPercent(in); err == nil {
			t.Errorf("%q: accepted as %v", in, got)
		}
	}
}

// FuzzParseCanaryPercent: what the CLI takes from a user is either a share
// strictly between 0 and 100 or a refusal naming the input.
func FuzzParseCanaryPercent(f *testing.F) {
	for _, s := range []string{"10%", "2.5", "100%", "NaN", "1e-300", "+5%", " 7 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseCanaryPercent(s)
		if err != nil {
			if !strings.Contains(err.Error(), "canary") {
				t.Fatalf("%q: refusal %q does not say what it refused", s, err)
			}
			return
		}
		if !(p > 0 && p < 100) || math.IsNaN(p) {
			t.Fatalf("%q: accepted %v", s, p)
		}
	})
}

// FuzzModelRequest: a model API body from a client is decoded and checked
// as the registry does; whatever passes has a name, a version and figures
// the registry can store and bind with.
func FuzzModelRequest(f *testing.F) {
	f.Add([]byte(`{"model":"llama3","version":"v2","p95_ms":400,"memory_mb":16000,"cold_start_ms":250}`))
	f.Add([]byte(`{"model":"a b","version":"v2"}`))
	f.Add([]byte(`{"model":"m","version":"v.1-rc_2","p95_ms":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r ModelReportRequest
		if json.Unmarshal(body, &r) != nil {
			return
		}
		if CheckModelRef(r.ModelRef, true) != nil || CheckModelFigures(r.ModelFigures) != nil {
			return
		}
		if r.Model == "" || len(r.Model) > MaxModelNameLen || strings.ContainsAny(r.Model, " \t\r\n") {
			t.Fatalf("model name %q accepted", r.Model)
		}
		if r.Version == "" || strings.ContainsAny(r.Version, ", @") {
			t.Fatalf("version %q accepted: it would break the worker's label list or the queue key", r.Version)
		}
		if tok := ModelToken(r.Model); tok == "" || strings.ContainsAny(tok, ".*> ") {
			t.Fatalf("model %q: token %q is not one subject token", r.Model, tok)
		}
	})
}
