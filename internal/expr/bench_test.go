package expr

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchPayload is a 1 KiB chat-completion-like body with the field the
// benchmark filter reads near its end, so the scan is the long one.
var benchPayload = func() []byte {
	msgs := `[{"role":"system","content":"You are a careful assistant. Answer briefly and cite sources."},` +
		`{"role":"user","content":"Summarise the quarterly report for the board, with the three main risks."},` +
		`{"role":"assistant","content":"Revenue grew 12% on strong cloud demand; margins held. Risks: supplier concentration, FX exposure, and hiring pace in the EU."}]`
	body := `{"id":"chatcmpl-9f8e7d6c5b4a","object":"chat.completion","created":1767225600,` +
		`"model":"llama3-8b-instruct","messages":` + msgs + `,` +
		`"usage":{"prompt_tokens":412,"completion_tokens":96,"total_tokens":508},` +
		`"tags":["finance","summary","board"],"user":{"id":"u-1842","tier":"gold","region":"eu-west-1"},` +
		`"pad":"` + strings.Repeat("x", 1) + `","confidence":0.91,"done":true}`
	pad := 1024 - len(body)
	if pad < 0 {
		panic("bench payload too large")
	}
	body = strings.Replace(body, `"pad":"x"`, `"pad":"`+strings.Repeat("x", pad+1)+`"`, 1)
	if len(body) != 1024 || !json.Valid([]byte(body)) {
		panic("bench payload is not 1 KiB of JSON")
	}
	return []byte(body)
}()

var benchHeader = map[string][]string{
	"AI-Model":         {"llama3-8b-instruct"},
	"AI-Priority":      {"2"},
	"AI-Tenant":        {"acme"},
	"AI-Intent":        {"reasoning"},
	"AI-Prompt-Tokens": {"412"},
	"AI-Received":      {"2026-01-02T15:04:05.123456789Z"},
	"traceparent":      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	"Nats-Msg-Id":      {"m-1842"},
}

func benchMatch(b *testing.B, src string, want bool) {
	e := testEnv(b)
	p, err := e.Compile(src)
	if err != nil {
		b.Fatal(err)
	}
	m := Message{Subject: "ai.inference.llm", Header: benchHeader, Data: benchPayload}
	if ok, err := p.Match(m); ok != want || err != nil {
		b.Fatalf("Match = %v, %v; want %v", ok, err, want)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	b.ResetTimer()
	for b.Loop() {
		if ok, _ := p.Match(m); !ok {
			b.Fatal("no match")
		}
	}
}

// BenchmarkMatchTwoFields is the filter of the issue: one payload field near
// the end of a 1 KiB body and one envelope field. Target: <= 1 µs.
func BenchmarkMatchTwoFields(b *testing.B) {
	benchMatch(b, `payload.confidence > 0.85 && model.startsWith("llama")`, true)
}

// BenchmarkMatchEnvelope reads only envelope variables: the payload is never
// looked at.
func BenchmarkMatchEnvelope(b *testing.B) {
	benchMatch(b, `model.startsWith("llama") && priority <= 4 && tenant == "acme" && prompt_tokens < 8000`, true)
}

// BenchmarkMatchHeaders reads the headers map and the subject.
func BenchmarkMatchHeaders(b *testing.B) {
	benchMatch(b, `subject.startsWith("ai.inference.") && headers["Nats-Msg-Id"] != "" && "traceparent" in headers`, true)
}

// BenchmarkMatchNested goes into nested objects and arrays.
func BenchmarkMatchNested(b *testing.B) {
	benchMatch(b, `payload.messages[1].role == "user" && payload.usage.prompt_tokens > 100.0`, true)
}

// BenchmarkMatchExists iterates an array with a macro (a metered program).
func BenchmarkMatchExists(b *testing.B) {
	benchMatch(b, `payload.tags.exists(t, t == "board") && has(payload.user.tier)`, true)
}

// BenchmarkDecodeBaseline is what the lazy payload avoids: decoding the whole
// body with encoding/json to read one field.
func BenchmarkDecodeBaseline(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPayload)))
	for b.Loop() {
		var v map[string]any
		if err := json.Unmarshal(benchPayload, &v); err != nil {
			b.Fatal(err)
		}
		if v["confidence"].(float64) <= 0.85 {
			b.Fatal("no match")
		}
	}
}

func BenchmarkKey(b *testing.B) {
	e := testEnv(b)
	p, err := e.CompileKey(`tenant + "/" + payload.user.id`)
	if err != nil {
		b.Fatal(err)
	}
	m := Message{Header: benchHeader, Data: benchPayload}
	b.ReportAllocs()
	for b.Loop() {
		if k, err := p.Key(m); err != nil || k != "acme/u-1842" {
			b.Fatal(k, err)
		}
	}
}

func BenchmarkCompileCached(b *testing.B) {
	e := testEnv(b)
	src := `payload.confidence > 0.85 && model.startsWith("llama")`
	if _, err := e.Compile(src); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Compile(src); err != nil {
			b.Fatal(err)
		}
	}
}
