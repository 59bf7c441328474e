// Package provenance is the hash chain SemaQ keeps for the sessions of a
// stream with provenance on (docs/provenance.md): every message of a session
// carries the hash of its content and of the message before it, so a copy
// of the session, exported from the broker, can be checked without it.
//
// The broker computes the links; this package holds the one definition of
// what a link's hash covers (its canonical form), the signature over it, and
// the check of an exported chain (Verify), so a verifier in Go needs nothing
// else.
//
// # The canonical form
//
// A link's hash is SHA-256 over these fields, in this order, each written as
// its length in decimal, a colon, its bytes and a comma (a netstring):
//
//	"semaq-provenance/1"
//	the stream's name
//	the subject the message is stored under
//	the link's number in its session's chain, decimal, from 1
//	the previous link's hash, in hex ("" for the first link)
//	the selected headers, as one field: for each header, in order of its
//	  lower-case name (names equal but for case: in byte order of their
//	  stored spelling), then of its values as stored, the name (lower
//	  case) and the value, each a netstring
//	the payload
//
// The selected headers are every AI-* header (the envelope, the tenant and
// publisher the broker stamps, AI-Received) but the chain's own (AI-Hash,
// AI-Prev-Hash, AI-Chain-Seq, AI-Signature, AI-Key-Id), and Nats-Msg-Id
// and Nats-TTL. Trace context and JetStream's conditions are not content.
//
// # The export format
//
// An export (Writer, Reader) is NDJSON: one JSON object per line, lines
// ending in "\n" (or "\r\n"). Line 1 is the header (ExportHeader):
//
//	{"semaq_provenance":1, "stream":"AGENT", "tenant":"acme", "session":"s-1",
//	 "provenance":"signed",
//	 "head":{"hash":"<hex>", "links":42, "first":"<RFC 3339>", "last":"<RFC 3339>", "seq":1301},
//	 "keys":[{"id":"<KeyID>", "node":"n1", "public_key":"<base64>"}],
//	 "exported":"<RFC 3339>"}
//
// Then one line per message of the session, in stream order
// (ExportLink): {"seq": its stream sequence, "subject": as stored, "time":
// when the stream stored it, "headers": every stored header, name to its
// values in order, "data": the payload in base64}. A Reader refuses
// unknown fields, another version, blank lines, data after a line's
// object, a line longer than ReaderOptions.MaxLineBytes (16 MiB), a
// header longer than MaxHeaderBytes, more links than
// ReaderOptions.MaxLinks (1,048,576), with a *FormatError naming the line.
//
// Verify checks an export with nothing else: see its documentation and
// docs/provenance.md.
package provenance

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The headers of a link, stamped by the broker on every message of a
// session in a stream with provenance on. A client may not set them.
const (
	// HdrHash is the link's hash, in hex (64 characters).
	HdrHash = "AI-Hash"
	// HdrPrevHash is the previous link's hash; absent on a session's first.
	HdrPrevHash = "AI-Prev-Hash"
	// HdrChainSeq is the link's number in its session's chain, from 1.
	HdrChainSeq = "AI-Chain-Seq"
	// HdrSignature is the Ed25519 signature of the link's hash by the node
	// that stored it (streams with signed provenance), base64 (std).
	HdrSignature = "AI-Signature"
	// HdrKeyID names the key that signed: KeyID of its public key.
	HdrKeyID = "AI-Key-Id"
)

// Version is the canonical form's name, the first field of every hash.
const Version = "semaq-provenance/1"

// IsChainHeader reports whether name (any case) is one of the chain's own
// headers, which the broker stamps.
func IsChainHeader(name string) bool {
	for _, h := range [...]string{HdrHash, HdrPrevHash, HdrChainSeq, HdrSignature, HdrKeyID} {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// Selected reports whether header name is part of a link's canonical form.
func Selected(name string) bool {
	if IsChainHeader(name) {
		return false
	}
	if len(name) >= 3 && strings.EqualFold(name[:3], "ai-") {
		return true
	}
	return strings.EqualFold(name, "Nats-Msg-Id") || strings.EqualFold(name, "Nats-TTL")
}

// Link is one message of a chain as the hash sees it.
type Link struct {
	Stream  string
	Subject string
	// Seq is the link's number in its session's chain, from 1.
	Seq uint64
	// Prev is the previous link's hash in hex, "" for the first.
	Prev   string
	Header map[string][]string
	Data   []byte
}

// Hash is l's hash, SHA-256 over its canonical form.
func Hash(l *Link) [sha256.Size]byte {
	h := sha256.New()
	var buf []byte
	field := func(b []byte) {
		buf = strconv.AppendInt(buf[:0], int64(len(b)), 10)
		buf = append(buf, ':')
		h.Write(buf)
		h.Write(b)
		h.Write([]byte{','})
	}
	fieldS := func(s string) { field([]byte(s)) }
	fieldS(Version)
	fieldS(l.Stream)
	fieldS(l.Subject)
	fieldS(strconv.FormatUint(l.Seq, 10))
	fieldS(l.Prev)
	type kv struct {
		name, stored string
		vals         []string
	}
	sel := make([]kv, 0, 8)
	for k, vs := range l.Header {
		if Selected(k) {
			sel = append(sel, kv{strings.ToLower(k), k, vs})
		}
	}
	// Two names equal but for case (a header block may hold both) are
	// ordered by their stored spelling, so the order never depends on a
	// map's.
	slices.SortFunc(sel, func(a, b kv) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.stored, b.stored)
	})
	// The header block is one field: its length first, so a header can
	// never be read as the payload or the other way round.
	var block []byte
	for _, e := range sel {
		for _, v := range e.vals {
			block = strconv.AppendInt(block, int64(len(e.name)), 10)
			block = append(block, ':')
			block = append(block, e.name...)
			block = append(block, ',')
			block = strconv.AppendInt(block, int64(len(v)), 10)
			block = append(block, ':')
			block = append(block, v...)
			block = append(block, ',')
		}
	}
	field(block)
	field(l.Data)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// HashHex is Hash in hex, as HdrHash carries it.
func HashHex(l *Link) string {
	s := Hash(l)
	return hex.EncodeToString(s[:])
}

// signed is what a signature covers: the canonical form's name and the
// hash, so a signature over a chain link is never one over anything else.
func signed(hashHex string) []byte {
	return []byte(Version + " link " + hashHex)
}

// Sign signs a link's hash (hex) with key.
func Sign(key ed25519.PrivateKey, hashHex string) []byte {
	return ed25519.Sign(key, signed(hashHex))
}

// VerifySignature checks sig over a link's hash (hex) with pub.
func VerifySignature(pub ed25519.PublicKey, hashHex string, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, signed(hashHex), sig)
}

// KeyID names a public key in a chain: the first 16 hex characters of its
// SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// CheckHash reports whether s is a hash as the chain writes it: 64
// lower-case hex characters.
func CheckHash(s string) error {
	if len(s) != 2*sha256.Size {
		return fmt.Errorf("hash %.80q is %d characters, not %d", s, len(s), 2*sha256.Size)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return errors.New("hash " + strconv.Quote(s) + " is not lower-case hex")
		}
	}
	return nil
}

// SessionKey is the token naming a session's head record in its stream's
// subjects (semaq.ChainHeadSubject): the hex SHA-256 of its tenant and id,
// so any session id fits a subject.
func SessionKey(tenant, session string) string {
	s := sha256.Sum256([]byte(tenant + "\x00" + session))
	return hex.EncodeToString(s[:16])
}
