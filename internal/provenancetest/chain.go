// Package provenancetest makes session chains as the broker stores them
// (docs/provenance.md), for the tests of what reads them: the verifier,
// the SDK's export, the CLI. Its links are hashed and signed with package
// provenance, as the broker's are; its times and keys are fixed, so what
// it makes is the same on every run.
package provenancetest

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"strconv"
	"testing"
	"time"

	"github.com/semaq/semaq/provenance"
)

// Start is the time of a chain's first link.
var Start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Key is a fixed Ed25519 key made from seed.
func Key(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

// Chain is one session's chain in a stream.
type Chain struct {
	Stream, Tenant, Session string
	// Node and Key sign the links added from now on; a nil Key adds
	// unsigned links.
	Node string
	Key  ed25519.PrivateKey
	// Keys are the keys the export lists (Signed adds to them).
	Keys []provenance.ExportKey
	// Links are the chain's links, in stream order.
	Links []provenance.ExportLink
	// Seq is the stream sequence of the stream's last message.
	Seq uint64
}

// New starts an unsigned chain.
func New(stream, tenant, session string) *Chain {
	return &Chain{Stream: stream, Tenant: tenant, Session: session}
}

// Signed makes the links added from now on signed by node's key.
func (c *Chain) Signed(node string, key ed25519.PrivateKey) *Chain {
	c.Node, c.Key = node, key
	pub := key.Public().(ed25519.PublicKey)
	c.Keys = append(c.Keys, provenance.ExportKey{ID: provenance.KeyID(pub), Node: node, PublicKey: pub})
	return c
}

// Skip says n messages of other sessions were stored since the last.
func (c *Chain) Skip(n uint64) { c.Seq += n }

// Add stores a message of the session on subject, with the envelope
// headers hdr (AI-Session, AI-Tenant and AI-Received are stamped), as the
// next link.
func (c *Chain) Add(subject, data string, hdr map[string][]string) *provenance.ExportLink {
	c.Seq++
	at := Start.Add(time.Duration(len(c.Links)) * time.Second)
	h := map[string][]string{"AI-Session": {c.Session}, "AI-Received": {at.Format(time.RFC3339Nano)}}
	if c.Tenant != "" {
		h["AI-Tenant"] = []string{c.Tenant}
	}
	for k, v := range hdr {
		h[k] = v
	}
	l := provenance.ExportLink{Seq: c.Seq, Subject: subject, Time: at, Headers: h, Data: []byte(data)}
	prev := ""
	if n := len(c.Links); n > 0 {
		prev = c.Links[n-1].Headers[provenance.HdrHash][0]
	}
	Stamp(c.Stream, &l, uint64(len(c.Links)+1), prev, c.Key)
	c.Links = append(c.Links, l)
	return &c.Links[len(c.Links)-1]
}

// Stamp makes l link n of a chain of stream after the link whose hash is
// prev, as the broker would: it replaces l's chain headers, hashes it and,
// with a key, signs it. Tests use it to forge links that hash correctly.
func Stamp(stream string, l *provenance.ExportLink, n uint64, prev string, key ed25519.PrivateKey) {
	for k := range l.Headers {
		if provenance.IsChainHeader(k) {
			delete(l.Headers, k)
		}
	}
	l.Headers[provenance.HdrChainSeq] = []string{strconv.FormatUint(n, 10)}
	if prev != "" {
		l.Headers[provenance.HdrPrevHash] = []string{prev}
	}
	hash := provenance.HashHex(&provenance.Link{Stream: stream, Subject: l.Subject, Seq: n, Prev: prev, Header: l.Headers, Data: l.Data})
	l.Headers[provenance.HdrHash] = []string{hash}
	if key != nil {
		pub := key.Public().(ed25519.PublicKey)
		l.Headers[provenance.HdrSignature] = []string{encode(provenance.Sign(key, hash))}
		l.Headers[provenance.HdrKeyID] = []string{provenance.KeyID(pub)}
	}
}

// Head is the chain's head record: its last link, stored after it.
func (c *Chain) Head() provenance.ExportHead {
	h := provenance.ExportHead{Links: uint64(len(c.Links)), Seq: c.Seq + 1}
	if n := len(c.Links); n > 0 {
		h.Hash = c.Links[n-1].Headers[provenance.HdrHash][0]
		h.First, h.Last = c.Links[0].Time, c.Links[n-1].Time
	}
	return h
}

// Header is the header of an export of the chain.
func (c *Chain) Header() *provenance.ExportHeader {
	mode := "session"
	if len(c.Keys) > 0 {
		mode = "signed"
	}
	return &provenance.ExportHeader{Stream: c.Stream, Tenant: c.Tenant, Session: c.Session, Provenance: mode,
		Head: c.Head(), Keys: c.Keys, Exported: Start.Add(time.Hour)}
}

// Export is an export of the chain with the header h (nil: Header()) and
// the links given (the chain's, or a tampered copy of them).
func (c *Chain) Export(t testing.TB, h *provenance.ExportHeader, links []provenance.ExportLink) []byte {
	t.Helper()
	if h == nil {
		h = c.Header()
	}
	var b bytes.Buffer
	w, err := provenance.NewWriter(&b, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range links {
		if err := w.WriteLink(&links[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Copy is a deep copy of links, to tamper with.
func Copy(links []provenance.ExportLink) []provenance.ExportLink {
	out := make([]provenance.ExportLink, len(links))
	for i, l := range links {
		out[i] = l
		out[i].Data = bytes.Clone(l.Data)
		out[i].Headers = make(map[string][]string, len(l.Headers))
		for k, v := range l.Headers {
			out[i].Headers[k] = append([]string(nil), v...)
		}
	}
	return out
}

func encode(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
