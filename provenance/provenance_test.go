package provenance_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/semaq/semaq/internal/provenancetest"
	"github.com/semaq/semaq/provenance"
)

// goldenLink and goldenForm are the vector docs/provenance.md gives: a
// change of the canonical form changes its hash, which fails here before
// any chain stored by an older broker fails to verify.
var goldenLink = provenance.Link{
	Stream: "AGENT", Subject: "agent.acme.plan", Seq: 2,
	Prev: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
	Header: map[string][]string{
		"AI-Session": {"s-1"}, "AI-Tenant": {"acme"}, "AI-Model": {"llama3"}, "AI-Tag": {"a", "b"},
		"Nats-Msg-Id": {"m-2"},
		// Not content: neither is hashed.
		"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"AI-Hash":     {"0000000000000000000000000000000000000000000000000000000000000000"},
	},
	Data: []byte(`{"step":"plan"}`),
}

const (
	goldenForm = `18:semaq-provenance/1,5:AGENT,15:agent.acme.plan,1:2,` +
		`64:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08,` +
		`106:8:ai-model,6:llama3,10:ai-session,3:s-1,6:ai-tag,1:a,6:ai-tag,1:b,9:ai-tenant,4:acme,11:nats-msg-id,3:m-2,,` +
		`15:{"step":"plan"},`
	goldenHash = "f78bc24010fdc7235984c1079618d11ef2822ebb4a6b99baada7f239beecb21d"
)

func TestProvenanceGoldenVector(t *testing.T) {
	if got := provenance.HashHex(&goldenLink); got != goldenHash {
		t.Fatalf("HashHex(golden link) = %s, want %s: the canonical form changed, and every stored chain with it", got, goldenHash)
	}
	sum := sha256.Sum256([]byte(goldenForm))
	if got := hex.EncodeToString(sum[:]); got != goldenHash {
		t.Fatalf("SHA-256 of the documented canonical form = %s, want %s: the form in docs/provenance.md is wrong", got, goldenHash)
	}
}

// variant is the golden link with its headers changed by f.
func variant(f func(h map[string][]string)) *provenance.Link {
	l := goldenLink
	l.Header = map[string][]string{}
	for k, v := range goldenLink.Header {
		l.Header[k] = append([]string(nil), v...)
	}
	f(l.Header)
	return &l
}

func TestProvenanceHashCoversWhatIsContent(t *testing.T) {
	cases := []struct {
		name   string
		change func(h map[string][]string)
		same   bool
	}{
		{"header name case", func(h map[string][]string) { h["ai-model"] = h["AI-Model"]; delete(h, "AI-Model") }, true},
		{"all names upper case", func(h map[string][]string) {
			for k, v := range h {
				delete(h, k)
				h[upper(k)] = v
			}
		}, true},
		{"trace context", func(h map[string][]string) {
			h["traceparent"] = []string{"00-ffffffffffffffffffffffffffffffff-b7ad6b7169203331-01"}
		}, true},
		{"a JetStream condition", func(h map[string][]string) { h["Nats-Expected-Stream"] = []string{"AGENT"} }, true},
		{"the chain's own headers", func(h map[string][]string) {
			h["AI-Signature"], h["AI-Key-Id"], h["AI-Chain-Seq"] = []string{"c2ln"}, []string{"1a2b"}, []string{"99"}
		}, true},
		{"header value order", func(h map[string][]string) { h["AI-Tag"] = []string{"b", "a"} }, false},
		{"a header value", func(h map[string][]string) { h["AI-Model"] = []string{"llama4"} }, false},
		{"an added AI header", func(h map[string][]string) { h["AI-Priority"] = []string{"9"} }, false},
		{"a removed AI header", func(h map[string][]string) { delete(h, "AI-Tenant") }, false},
		{"the message id", func(h map[string][]string) { h["Nats-Msg-Id"] = []string{"m-3"} }, false},
		{"a TTL", func(h map[string][]string) { h["Nats-TTL"] = []string{"1h"} }, false},
		{"a value moved to the name", func(h map[string][]string) { delete(h, "AI-Model"); h["AI-Model6:llama3"] = nil }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := provenance.HashHex(variant(tc.change))
			if same := got == goldenHash; same != tc.same {
				t.Fatalf("hash %s; unchanged = %v, want %v", got, same, tc.same)
			}
		})
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func TestProvenanceHashOfNamesEqualButForCaseIsStable(t *testing.T) {
	// A header block may hold both spellings: the order of a map's keys
	// must not decide the hash.
	l := variant(func(h map[string][]string) { h["ai-model"] = []string{"other"} })
	first := provenance.HashHex(l)
	for range 50 {
		if got := provenance.HashHex(l); got != first {
			t.Fatalf("hash changed between runs: %s then %s", first, got)
		}
	}
	if first == goldenHash {
		t.Fatal("a second spelling of a header with another value did not change the hash")
	}
}

func TestProvenanceSignature(t *testing.T) {
	key := provenancetest.Key(1)
	sig := provenance.Sign(key, goldenHash)
	pub := key.Public().(ed25519.PublicKey)
	if !provenance.VerifySignature(pub, goldenHash, sig) {
		t.Fatal("a signature does not verify with its key")
	}
	if provenance.VerifySignature(provenancetest.Key(2).Public().(ed25519.PublicKey), goldenHash, sig) {
		t.Fatal("a signature verifies with another key")
	}
	other := "0" + goldenHash[1:]
	if provenance.VerifySignature(pub, other, sig) {
		t.Fatal("a signature verifies over another hash")
	}
	if id := provenance.KeyID(pub); len(id) != 16 || provenance.KeyID(provenancetest.Key(2).Public().(ed25519.PublicKey)) == id {
		t.Fatalf("KeyID %q: want 16 hex characters, different per key", id)
	}
}
