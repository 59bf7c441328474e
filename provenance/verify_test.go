package provenance_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/provenancetest"
	"github.com/semaq/semaq/provenance"
)

// chain is a session of 8 links, each stored after another session's
// message: link k is at stream seq 99+2k (101, 103, … 115), the head
// record at 116.
func chain(signed bool) *provenancetest.Chain {
	c := provenancetest.New("AGENT", "acme", "s-1")
	if signed {
		c.Signed("n1", provenancetest.Key(1))
	}
	c.Skip(100)
	for k := 1; k <= 8; k++ {
		c.Add("agent.acme.step", fmt.Sprintf(`{"step":%d}`, k), map[string][]string{
			"AI-Model":    {"llama3"},
			"Nats-Msg-Id": {fmt.Sprintf("m-%d", k)},
			"traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		})
		c.Skip(1)
	}
	c.Seq-- // the head record follows the last link
	return c
}

func verify(t *testing.T, export []byte, opts provenance.VerifyOptions) *provenance.Report {
	t.Helper()
	rep, err := provenance.Verify(bytes.NewReader(export), opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

func hashOf(l provenance.ExportLink) string { return l.Headers[provenance.HdrHash][0] }

func TestProvenanceVerifyUntouched(t *testing.T) {
	c := chain(false)
	rep := verify(t, c.Export(t, nil, c.Links), provenance.VerifyOptions{})
	want := "OK: 8 links of session s-1 (tenant acme) in stream AGENT, head " + hashOf(c.Links[7]) + ", not signed"
	if rep.String() != want || !rep.OK() {
		t.Fatalf("report %q, want %q", rep.String(), want)
	}
}

// TestProvenanceVerifyTampered tampers with an export in each way a
// copy can be and checks the verdict names the first bad link.
func TestProvenanceVerifyTampered(t *testing.T) {
	c := chain(false)
	h4, h5 := hashOf(c.Links[3]), hashOf(c.Links[4])
	cases := []struct {
		name   string
		tamper func(l []provenance.ExportLink) []provenance.ExportLink
		want   string // "" for OK
	}{
		{"payload", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[6].Data = []byte(`{"step":77}`)
			return l
		}, "link 7 (stream seq 113): modified: its content does not hash to its AI-Hash"},
		{"selected header", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[2].Headers["AI-Model"] = []string{"gpt-x"}
			return l
		}, "link 3 (stream seq 105): modified: its content does not hash to its AI-Hash"},
		{"stamped receipt time", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[1].Headers["AI-Received"] = []string{"2020-01-01T00:00:00Z"}
			return l
		}, "link 2 (stream seq 103): modified: its content does not hash to its AI-Hash"},
		{"subject", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[4].Subject = "agent.acme.other"
			return l
		}, "link 5 (stream seq 109): modified: its content does not hash to its AI-Hash"},
		{"unselected header (trace context)", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[2].Headers["traceparent"] = []string{"00-ffffffffffffffffffffffffffffffff-b7ad6b7169203331-01"}
			delete(l[3].Headers, "traceparent")
			return l
		}, ""},
		{"header name case", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[2].Headers["ai-model"] = l[2].Headers["AI-Model"]
			delete(l[2].Headers, "AI-Model")
			return l
		}, ""},
		{"stream seq and time (not content)", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[2].Seq = 104
			l[2].Time = l[2].Time.Add(1)
			return l
		}, ""},
		{"link in the middle removed", func(l []provenance.ExportLink) []provenance.ExportLink {
			return append(l[:4], l[5:]...)
		}, "link 5 missing: link 4 (stream seq 107) is followed by link 6 (stream seq 111)"},
		{"two links removed", func(l []provenance.ExportLink) []provenance.ExportLink {
			return append(l[:3], l[5:]...)
		}, "links 4 to 5 missing: link 3 (stream seq 105) is followed by link 6 (stream seq 111)"},
		{"first link removed", func(l []provenance.ExportLink) []provenance.ExportLink {
			return l[1:]
		}, "link 1 missing: the export starts with link 2 (stream seq 103)"},
		{"last link removed", func(l []provenance.ExportLink) []provenance.ExportLink {
			return l[:7]
		}, "link 8 missing: the export ends at link 7 (stream seq 113); the head says 8 links"},
		{"every link removed", func(l []provenance.ExportLink) []provenance.ExportLink {
			return nil
		}, "links 1 to 8 missing: the export holds no link; the head says 8"},
		{"forged link inserted before its namesake", func(l []provenance.ExportLink) []provenance.ExportLink {
			f := provenancetest.Copy(l[4:5])[0]
			f.Seq, f.Data = 108, []byte(`{"step":"forged"}`)
			provenancetest.Stamp("AGENT", &f, 5, h4, nil)
			return append(l[:4], append([]provenance.ExportLink{f}, l[4:]...)...)
		}, "link 5 (stream seq 108): inserted: the chain goes on from another link 5 (stream seq 109), not this one"},
		{"forged link inserted after its namesake", func(l []provenance.ExportLink) []provenance.ExportLink {
			f := provenancetest.Copy(l[4:5])[0]
			f.Seq, f.Data = 110, []byte(`{"step":"forged"}`)
			provenancetest.Stamp("AGENT", &f, 5, h4, nil)
			return append(l[:5], append([]provenance.ExportLink{f}, l[5:]...)...)
		}, "link 5 (stream seq 110): inserted: a second link 5; the chain goes on from the one at stream seq 109"},
		{"forged link with the next number", func(l []provenance.ExportLink) []provenance.ExportLink {
			f := provenancetest.Copy(l[4:5])[0]
			f.Seq, f.Data = 110, []byte(`{"step":"forged"}`)
			provenancetest.Stamp("AGENT", &f, 6, h5, nil)
			return append(l[:5], append([]provenance.ExportLink{f}, l[5:]...)...)
		}, "link 6 (stream seq 110): inserted: the chain goes on from another link 6 (stream seq 111), not this one"},
		{"forged link naming an older link", func(l []provenance.ExportLink) []provenance.ExportLink {
			f := provenancetest.Copy(l[4:5])[0]
			f.Seq, f.Data = 108, []byte(`{"step":"forged"}`)
			provenancetest.Stamp("AGENT", &f, 5, hashOf(l[1]), nil)
			return append(l[:4], append([]provenance.ExportLink{f}, l[4:]...)...)
		}, "link 5 (stream seq 108): inserted: its AI-Prev-Hash does not name link 4 (stream seq 107)"},
		{"forged link appended", func(l []provenance.ExportLink) []provenance.ExportLink {
			f := provenancetest.Copy(l[7:8])[0]
			f.Seq = 117
			provenancetest.Stamp("AGENT", &f, 9, hashOf(l[7]), nil)
			return append(l, f)
		}, "link 9 (stream seq 117): inserted: the head says the chain has 8 links"},
		{"link replaced by a re-hashed one", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[5].Data = []byte(`{"step":"rewritten"}`)
			provenancetest.Stamp("AGENT", &l[5], 6, h5, nil)
			return l
		}, "link 6 (stream seq 111): modified: it hashes to its AI-Hash, but link 7 (stream seq 113) follows another link 6: this one was replaced or re-hashed"},
		{"last link replaced by a re-hashed one", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[7].Data = []byte(`{"step":"rewritten"}`)
			provenancetest.Stamp("AGENT", &l[7], 8, hashOf(l[6]), nil)
			return l
		}, "link 8 (stream seq 115): modified: its AI-Hash is not the head's hash " + hashOf(c.Links[7])},
		{"two links swapped", func(l []provenance.ExportLink) []provenance.ExportLink {
			l[2], l[3] = l[3], l[2]
			return l
		}, "link 4 (stream seq 107): reordered: it comes before link 3 (stream seq 105)"},
		{"link moved to the end", func(l []provenance.ExportLink) []provenance.ExportLink {
			return append(append(l[:1:1], l[2:]...), l[1])
		}, "link 3 (stream seq 105): reordered: it comes before link 2 (stream seq 103)"},
		{"link copied", func(l []provenance.ExportLink) []provenance.ExportLink {
			return append(l[:5], append([]provenance.ExportLink{l[4]}, l[5:]...)...)
		}, "link 5 (stream seq 109): inserted: a copy of link 5 (stream seq 109)"},
		{"another session's link", func(l []provenance.ExportLink) []provenance.ExportLink {
			o := provenancetest.New("AGENT", "acme", "s-2")
			o.Seq = 103
			other := o.Add("agent.acme.step", `{"step":1}`, nil)
			return append(l[:2], append([]provenance.ExportLink{*other}, l[2:]...)...)
		}, `link 1 (stream seq 104): inserted: it is a link of session "s-2", not "s-1"`},
		{"a message that is no link", func(l []provenance.ExportLink) []provenance.ExportLink {
			m := provenance.ExportLink{Seq: 104, Subject: "agent.acme.step", Time: l[1].Time,
				Headers: map[string][]string{"AI-Session": {"s-1"}}, Data: []byte("x")}
			return append(l[:2], append([]provenance.ExportLink{m}, l[2:]...)...)
		}, "line 4 (stream seq 104): inserted: not a link of a chain: it has no AI-Chain-Seq"},
		{"first link given a predecessor", func(l []provenance.ExportLink) []provenance.ExportLink {
			provenancetest.Stamp("AGENT", &l[0], 1, h4, nil)
			return l
		}, "link 1 (stream seq 101): inserted: it has an AI-Prev-Hash, which a chain's first link has not"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			links := tc.tamper(provenancetest.Copy(c.Links))
			rep := verify(t, c.Export(t, nil, links), provenance.VerifyOptions{})
			if tc.want == "" {
				if !rep.OK() {
					t.Fatalf("verdict %q, want OK", rep)
				}
				return
			}
			if rep.OK() || rep.String() != tc.want {
				t.Fatalf("verdict\n %q\nwant\n %q", rep, tc.want)
			}
		})
	}
}

func TestProvenanceVerifyEditedHead(t *testing.T) {
	c := chain(false)
	h := c.Header()
	h.Head.Hash = hashOf(c.Links[6])
	rep := verify(t, c.Export(t, h, c.Links), provenance.VerifyOptions{})
	want := "link 8 (stream seq 115): modified: its AI-Hash is not the head's hash " + hashOf(c.Links[6])
	if rep.String() != want {
		t.Fatalf("verdict %q, want %q", rep, want)
	}
	h = c.Header()
	h.Head.Links = 7
	rep = verify(t, c.Export(t, h, c.Links), provenance.VerifyOptions{})
	if want := "link 8 (stream seq 115): inserted: the head says the chain has 7 links"; rep.String() != want {
		t.Fatalf("verdict %q, want %q", rep, want)
	}
}

func TestProvenanceVerifyAnchor(t *testing.T) {
	c := chain(false)
	export := c.Export(t, nil, c.Links)
	rep := verify(t, export, provenance.VerifyOptions{Head: hashOf(c.Links[4])})
	if !rep.OK() || rep.AnchoredAt != 5 || !strings.HasSuffix(rep.String(), ", not signed, anchored at link 5") {
		t.Fatalf("verdict %q (anchored at %d), want OK anchored at link 5", rep, rep.AnchoredAt)
	}
	// A rewritten chain: every link re-hashed from link 3 on, the head with
	// them. Consistent on its own; not the chain the anchor was taken of.
	links := provenancetest.Copy(c.Links)
	links[2].Data = []byte(`{"step":"rewritten"}`)
	for k := 2; k < len(links); k++ {
		provenancetest.Stamp("AGENT", &links[k], uint64(k+1), hashOf(links[k-1]), nil)
	}
	h := c.Header()
	h.Head.Hash = hashOf(links[7])
	rewritten := c.Export(t, h, links)
	if rep := verify(t, rewritten, provenance.VerifyOptions{}); !rep.OK() {
		t.Fatalf("a consistently rewritten chain: verdict %q; without an anchor it cannot be told", rep)
	}
	rep = verify(t, rewritten, provenance.VerifyOptions{Head: hashOf(c.Links[4])})
	want := "not anchored: the trusted head " + hashOf(c.Links[4]) + " is not the hash of any link of this chain: it was rewritten, or is another chain"
	if rep.String() != want {
		t.Fatalf("verdict %q, want %q", rep, want)
	}
	if _, err := provenance.Verify(bytes.NewReader(export), provenance.VerifyOptions{Head: "abc"}); err == nil {
		t.Fatal("a trusted head that is not a hash was accepted")
	}
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func TestProvenanceVerifySigned(t *testing.T) {
	c := chain(true)
	id1 := provenance.KeyID(pub(provenancetest.Key(1)))
	head := hashOf(c.Links[7])
	export := c.Export(t, nil, c.Links)

	rep := verify(t, export, provenance.VerifyOptions{})
	want := "OK: 8 links of session s-1 (tenant acme) in stream AGENT, head " + head + ", signed by key " + id1 + " (n1), not pinned (the export's own keys)"
	if rep.String() != want {
		t.Fatalf("unpinned: %q, want %q", rep, want)
	}
	rep = verify(t, export, provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub(provenancetest.Key(1))}})
	if want := "OK: 8 links of session s-1 (tenant acme) in stream AGENT, head " + head + ", signed by key " + id1 + " (n1), trusted"; rep.String() != want {
		t.Fatalf("pinned: %q, want %q", rep, want)
	}
	rep = verify(t, export, provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub(provenancetest.Key(9))}})
	if want := "link 1 (stream seq 101): bad signature: key " + id1 + " (node n1) is not one of the trusted keys"; rep.String() != want {
		t.Fatalf("wrong trusted key: %q, want %q", rep, want)
	}

	cases := []struct {
		name   string
		tamper func(l []provenance.ExportLink)
		want   string
	}{
		{"signature of another link", func(l []provenance.ExportLink) {
			l[3].Headers[provenance.HdrSignature] = l[2].Headers[provenance.HdrSignature]
		}, "link 4 (stream seq 107): bad signature: the signature does not verify with key " + id1},
		{"signature not base64", func(l []provenance.ExportLink) {
			l[3].Headers[provenance.HdrSignature] = []string{"%%%"}
		}, "link 4 (stream seq 107): bad signature: its AI-Signature is not base64"},
		{"unknown key id", func(l []provenance.ExportLink) {
			l[5].Headers[provenance.HdrKeyID] = []string{"ffffffffffffffff"}
		}, "link 6 (stream seq 111): bad signature: key ffffffffffffffff is unknown: the export lists no such key"},
		{"key id that breaks the line", func(l []provenance.ExportLink) {
			l[5].Headers[provenance.HdrKeyID] = []string{"ab\nOK: all good"}
		}, `link 6 (stream seq 111): bad signature: key "ab\nOK: all good" is unknown: the export lists no such key`},
		{"no key id", func(l []provenance.ExportLink) {
			delete(l[5].Headers, provenance.HdrKeyID)
		}, "link 6 (stream seq 111): bad signature: its signature names no key (no AI-Key-Id)"},
		{"signature removed", func(l []provenance.ExportLink) {
			delete(l[4].Headers, provenance.HdrSignature)
		}, "link 5 (stream seq 109): bad signature: it is not signed (no AI-Signature), and the chain is"},
		{"forged link signed by another key", func(l []provenance.ExportLink) {
			l[4].Data = []byte("forged")
			provenancetest.Stamp("AGENT", &l[4], 5, hashOf(l[3]), provenancetest.Key(7))
		}, "link 5 (stream seq 109): bad signature: key " + provenance.KeyID(pub(provenancetest.Key(7))) + ` is unknown: the export lists no such key`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			links := provenancetest.Copy(c.Links)
			tc.tamper(links)
			rep := verify(t, c.Export(t, nil, links), provenance.VerifyOptions{})
			if rep.String() != tc.want {
				t.Fatalf("verdict\n %q\nwant\n %q", rep, tc.want)
			}
		})
	}

	// Every signature stripped: the header says the stream signs.
	links := provenancetest.Copy(c.Links)
	for _, l := range links {
		delete(l.Headers, provenance.HdrSignature)
		delete(l.Headers, provenance.HdrKeyID)
	}
	rep = verify(t, c.Export(t, nil, links), provenance.VerifyOptions{})
	if want := "link 1 (stream seq 101): bad signature: it is not signed (no AI-Signature), and the chain is"; rep.String() != want {
		t.Fatalf("signatures stripped: %q, want %q", rep, want)
	}
}

func TestProvenanceVerifyUnsignedWithTrustedKeys(t *testing.T) {
	c := chain(false)
	rep := verify(t, c.Export(t, nil, c.Links), provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub(provenancetest.Key(1))}})
	if want := "link 1 (stream seq 101): bad signature: it is not signed (no AI-Signature), and trusted keys were given"; rep.String() != want {
		t.Fatalf("verdict %q, want %q", rep, want)
	}
}

func TestProvenanceVerifyTwoSigners(t *testing.T) {
	c := provenancetest.New("AGENT", "", "s-9").Signed("n1", provenancetest.Key(1))
	c.Add("agent.x", "1", nil)
	c.Add("agent.x", "2", nil)
	c.Signed("n2", provenancetest.Key(2)) // the session's next messages reach another node
	c.Add("agent.x", "3", nil)
	id1, id2 := provenance.KeyID(pub(provenancetest.Key(1))), provenance.KeyID(pub(provenancetest.Key(2)))
	rep := verify(t, c.Export(t, nil, c.Links), provenance.VerifyOptions{
		TrustedKeys: []ed25519.PublicKey{pub(provenancetest.Key(2)), pub(provenancetest.Key(1))}})
	want := fmt.Sprintf("OK: 3 links of session s-9 in stream AGENT, head %s, signed by keys %s (n1), %s (n2), trusted", hashOf(c.Links[2]), id1, id2)
	if rep.String() != want {
		t.Fatalf("verdict %q, want %q", rep, want)
	}
	rep = verify(t, c.Export(t, nil, c.Links), provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub(provenancetest.Key(1))}})
	if want := "link 3 (stream seq 3): bad signature: key " + id2 + " (node n2) is not one of the trusted keys"; rep.String() != want {
		t.Fatalf("one node's key trusted: %q, want %q", rep, want)
	}
}

func TestProvenanceVerifyRefusesBadTrustedKey(t *testing.T) {
	c := chain(false)
	_, err := provenance.Verify(bytes.NewReader(c.Export(t, nil, c.Links)), provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{[]byte("short")}})
	if err == nil || !strings.Contains(err.Error(), "trusted key 1 is 5 bytes") {
		t.Fatalf("err %v, want the short key named", err)
	}
}

func TestProvenanceVerifyUnreadable(t *testing.T) {
	c := chain(false)
	export := c.Export(t, nil, c.Links)
	lines := bytes.Split(bytes.TrimSuffix(export, []byte("\n")), []byte("\n"))
	lines[3] = []byte(`{"seq":105,"subject":"agent.acme.step","headers":{},"data":"not base64!"}`)
	_, err := provenance.Verify(bytes.NewReader(bytes.Join(lines, []byte("\n"))), provenance.VerifyOptions{})
	var fe *provenance.FormatError
	if !errors.As(err, &fe) || fe.Line != 4 || !errors.Is(err, provenance.ErrFormat) {
		t.Fatalf("err %v, want a FormatError on line 4", err)
	}
	_ = base64.StdEncoding
}
