package pii

import (
	"strings"
	"testing"
)

// chatPrompt is a 1 KiB OpenAI-style chat request, as the broker's ingress sees them, with the given user text.
func chatPrompt(user string) []byte {
	const system = "You are a helpful assistant for an online bookshop. Answer briefly and politely, in the " +
		"customer's language. If you do not know the answer, say so and offer to pass the question on.\n" +
		"Never promise a delivery date; quote the shipping options instead: standard (3-5 days), express " +
		"(next day before noon) and pickup at the counter."
	const history = "Hello! I ordered two novels last week and one arrived with a torn cover. Can I get a " +
		"replacement, or should I return it first? The parcel said \"fragile\" but was not packed well."
	const answer = "I'm sorry to hear that. You can keep the damaged copy: we will send a replacement at no " +
		"cost. Please reply with a photo of the cover and the name on the order, and we'll take care of it."
	b := `{"model":"gpt-4o-mini","temperature":0.2,"max_tokens":400,"stream":true,"messages":[` +
		`{"role":"system","content":` + quote(system) + `},` +
		`{"role":"user","content":` + quote(history) + `},` +
		`{"role":"assistant","content":` + quote(answer) + `},` +
		`{"role":"user","content":` + quote(user) + `}]}`
	return []byte(b)
}

func quote(s string) string {
	return `"` + string(appendEncoded(nil, s)) + `"`
}

const (
	benchClean = "Thanks, that is kind of you. I've attached the photo now; the order was placed on the 3rd " +
		"of May and it's the second book, the blue hardback. Could you also tell me whether the sequel is " +
		"in stock yet?"
	benchPII = "Thanks! The order is under jane.roe@example.org, my number is +44 20 7946 0958 and you can " +
		"refund the card 4539 1488 0343 6467 if a replacement is not possible. Is the sequel in stock?"
)

func BenchmarkRedact(b *testing.B) {
	r, err := NewRedactor(Config{Paths: []string{"messages.*.content"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name     string
		payload  []byte
		entities int
	}{
		{"clean", chatPrompt(benchClean), 0},
		{"3-entities", chatPrompt(benchPII), 3},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, found, _, err := r.Redact(bc.payload, nil)
			if err != nil || len(found) != bc.entities {
				b.Fatalf("found %v, %v; want %d entities", found, err, bc.entities)
			}
			b.SetBytes(int64(len(bc.payload)))
			b.ReportAllocs()
			for b.Loop() {
				r.Redact(bc.payload, nil)
			}
		})
	}
}

func BenchmarkScanText(b *testing.B) {
	text := strings.Repeat(benchClean+" ", 5)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		Scan(text, nil)
	}
}
