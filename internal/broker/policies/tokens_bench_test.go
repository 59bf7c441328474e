package policies

import (
	"context"
	"slices"
	"testing"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/streamfilter"
	"github.com/semaq/semaq/internal/worker/upstream"
	"github.com/semaq/semaq/semaq"
)

// simRate is the simulated model's token rate the added delay is reported
// at: a fast hosted model's.
const simRate = 50.0

// simAnswer is a simulated model's answer, one token a record, as workers
// write them at that rate.
func simAnswer(b *testing.B, tokens int) []string {
	m, err := sim.New(sim.Config{Tokens: tokens, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	_, err = m.Generate(context.Background(), &openai.ChatRequest{Messages: []openai.Message{{Role: "user", Content: []byte(`"tell me about Lisbon"`)}}},
		func(p upstream.Piece) error { out = append(out, p.Text); return nil })
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkTokenPolicy runs the token-stream rules (no secrets or
// personal data out, a brand-safety word list that stops the stream) on a
// simulated answer one token per record, as the relay does, and reports
// what they cost per record and what holding back adds: the delay of the
// first token (added TTFT) and the mean delay of a token, in records and
// in milliseconds at simRate tokens/s.
func BenchmarkTokenPolicy(b *testing.B) {
	rules := []semaq.PolicyRule{
		{Name: "no-secrets-out", Streams: []string{semaq.PolicyStreamTokens}, Redact: []string{"secret", "email", "phone", "card"}},
		{Name: "brand-safety", Streams: []string{semaq.PolicyStreamTokens}, Words: []string{"competitor brand", "lawsuit", "guaranteed returns"}, OnMatch: semaq.ContentStop},
	}
	var frs []streamfilter.Rule
	for _, d := range rules {
		r, err := compileRule(d, ruleEnv{hashKey: []byte("bench")})
		if err != nil {
			b.Fatal(err)
		}
		frs = slices.Concat(frs, r.pii, r.content)
	}
	set, err := streamfilter.Compile(frs, streamfilter.Options{MaxHold: maxHold})
	if err != nil {
		b.Fatal(err)
	}
	answer := simAnswer(b, 256)
	var first float64
	st := set.Stream()
	for i, tok := range answer {
		out, _, _, _ := st.Write(tok)
		if out != "" {
			first = float64(i)
			break
		}
	}
	maxChunks, meanChunks := streamfilter.Delay(set, answer)
	b.ReportAllocs()
	b.ResetTimer()
	records := 0
	for b.Loop() {
		st := set.Stream()
		for _, tok := range answer {
			if _, _, _, err := st.Write(tok); err != nil {
				b.Fatal(err)
			}
		}
		st.Flush()
		records += len(answer)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(records), "ns/record")
	b.ReportMetric(first, "first-token-held-records")
	b.ReportMetric(first*1000/simRate, "added-ttft-ms@50tok/s")
	b.ReportMetric(meanChunks*1000/simRate, "mean-added-ms@50tok/s")
	b.ReportMetric(maxChunks, "max-held-records")
}
