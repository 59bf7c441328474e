package streamfilter

import (
	"strings"
	"testing"
)

// piiRules is about ten PII-style rules, the load the broker puts on each
// token stream.
func piiRules(tb testing.TB) []Rule {
	words, err := WordRules("words", []string{"password", "social security number", "confidential", "internal only", "api key"}, Mask, "[redacted]")
	if err != nil {
		tb.Fatal(err)
	}
	return []Rule{
		email,
		{Name: "phone", Pattern: `\+?\d{1,3}[-. ]?\(?\d{3}\)?[-. ]\d{3}[-. ]\d{4}`, Action: Mask, Replace: "[phone]"},
		{Name: "ssn", Pattern: `\b\d{3}-\d{2}-\d{4}\b`, Action: Mask, Replace: "[ssn]"},
		{Name: "card", Pattern: `\b(?:\d[ -]?){13,16}\b`, Validate: func(s string) bool { return luhn(strings.NewReplacer(" ", "", "-", "").Replace(s)) }, Action: Mask, Replace: "[card]"},
		{Name: "ipv4", Pattern: `\b(?:\d{1,3}\.){3}\d{1,3}\b`, Action: Mask, Replace: "[ip]"},
		{Name: "iban", Pattern: `\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b`, Action: Mask, Replace: "[iban]"},
		{Name: "aws-key", Pattern: `\bAKIA[0-9A-Z]{16}\b`, Action: Mask, Replace: "[key]"},
		{Name: "jwt", Pattern: `\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`, Action: Mask, Replace: "[jwt]"},
		{Name: "bomb", Pattern: `(?i)how to build a bomb`, Action: Stop},
		words,
	}
}

// answer is a 2 KiB model answer with a few entities in it.
func answer() string {
	para := "Sure! Here is a summary of the account. The customer, reachable at jane.doe@example.com or +1 415-555-0132, " +
		"asked about invoice 2291 and the server at 10.0.12.7. Their card ending 4242 was declined; no password was shared. " +
		"We recommend following up within two business days and keeping this note internal only, as usual for accounts like this. "
	var b strings.Builder
	for b.Len() < 2048 {
		b.WriteString(para)
	}
	return b.String()[:2048]
}

// BenchmarkStream writes a 2 KiB answer in 4-byte chunks, as a worker
// writes tokens, through about ten rules.
func BenchmarkStream(b *testing.B) {
	set := mustCompile(b, Options{}, piiRules(b)...)
	chunks := chunk(answer(), 4)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st := set.Stream()
		for _, c := range chunks {
			if _, _, _, err := st.Write(c); err != nil {
				b.Fatal(err)
			}
		}
		st.Flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/chunk")
	b.ReportMetric(0, "ns/op")
	mx, mean := Delay(set, chunks)
	b.ReportMetric(mx, "max-wait-chunks")
	b.ReportMetric(mean, "mean-wait-chunks")
}

// BenchmarkStreamNoMatch is the common case: text with nothing to find.
func BenchmarkStreamNoMatch(b *testing.B) {
	set := mustCompile(b, Options{}, piiRules(b)...)
	chunks := chunk(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 46)[:2048], 4)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st := set.Stream()
		for _, c := range chunks {
			st.Write(c)
		}
		st.Flush()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(chunks)), "ns/chunk")
	b.ReportMetric(0, "ns/op")
}
