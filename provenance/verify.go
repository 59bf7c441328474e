package provenance

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The headers of a message that name its session, as the envelope
// (package semaq) spells them.
const (
	hdrSession = "AI-Session"
	hdrTenant  = "AI-Tenant"
)

// VerifyOptions are what a verifier trusts besides the export.
type VerifyOptions struct {
	// TrustedKeys pins who may have signed: every link must then be
	// signed by one of them. Without them a signed export is checked
	// with the keys it lists itself, which proves it is consistent, not
	// who made it (Report.Pinned is false).
	TrustedKeys []ed25519.PublicKey
	// Head is a head hash obtained elsewhere and trusted (an anchor): the
	// chain must hold a link with this hash, so a chain rewritten or cut
	// before it fails.
	Head string
	// Reader bounds the export's reading.
	Reader ReaderOptions
}

// Kind is what is wrong with a link.
type Kind string

// The kinds of problem Verify reports.
const (
	// Modified: the link's content does not hash to its AI-Hash, or it
	// does but is not the link its successor (or the head) names.
	Modified Kind = "modified"
	// Missing: links of the chain are not in the export.
	Missing Kind = "missing"
	// Inserted: a line that is not a link of this chain: not a link at
	// all, another session's, a second link of a number, or one whose
	// AI-Prev-Hash names another link than the one before it.
	Inserted Kind = "inserted"
	// Reordered: a link of the chain before one that should precede it.
	Reordered Kind = "reordered"
	// BadSignature: a link of a signed chain without a valid signature by
	// a key the verifier trusts.
	BadSignature Kind = "bad signature"
	// NotAnchored: VerifyOptions.Head is no link of the chain.
	NotAnchored Kind = "not anchored"
)

// Problem is the first bad link of an export.
type Problem struct {
	Kind Kind
	// Link is the link's number in the chain (AI-Chain-Seq); for Missing
	// the first missing one. 0 when the line is not a link.
	Link uint64
	// LastLink is the last missing link of a run (Missing only).
	LastLink uint64
	// StreamSeq and Line locate the link in the stream and the export
	// (0 for Missing and NotAnchored).
	StreamSeq uint64
	Line      int
	// Detail says what is wrong.
	Detail string
}

// String is the problem on one line, e.g. "link 7 (stream seq 1234):
// modified: its content does not hash to its AI-Hash".
func (p *Problem) String() string {
	switch {
	case p.Kind == NotAnchored:
		return string(p.Kind) + ": " + p.Detail
	case p.Kind == Missing && p.LastLink > p.Link:
		return fmt.Sprintf("links %d to %d missing: %s", p.Link, p.LastLink, p.Detail)
	case p.Kind == Missing:
		return fmt.Sprintf("link %d missing: %s", p.Link, p.Detail)
	case p.Link == 0:
		return fmt.Sprintf("line %d (stream seq %d): %s: %s", p.Line, p.StreamSeq, p.Kind, p.Detail)
	}
	return fmt.Sprintf("link %d (stream seq %d): %s: %s", p.Link, p.StreamSeq, p.Kind, p.Detail)
}

// Report is what Verify found.
type Report struct {
	Stream, Tenant, Session string
	// Links is the number of links the export holds.
	Links uint64
	// Head is the head hash the export names.
	Head string
	// Signed: every link is signed (checked when Problem is nil).
	Signed bool
	// Signers are the ids of the keys that signed, in order of first use;
	// SignerNodes their nodes as the export names them ("" if unknown).
	Signers, SignerNodes []string
	// Pinned: the signatures were checked with VerifyOptions.TrustedKeys,
	// not the keys the export lists.
	Pinned bool
	// AnchoredAt is the link whose hash is VerifyOptions.Head (0: none
	// given).
	AnchoredAt uint64
	// Problem is the first bad link; nil when the export verifies.
	Problem *Problem
}

// OK reports whether the export verified.
func (r *Report) OK() bool { return r.Problem == nil }

// String is the verdict on one line: "OK: 42 links …" or the problem.
func (r *Report) String() string {
	if r.Problem != nil {
		return r.Problem.String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "OK: %d links of session %s", r.Links, show(r.Session))
	if r.Tenant != "" {
		fmt.Fprintf(&b, " (tenant %s)", show(r.Tenant))
	}
	fmt.Fprintf(&b, " in stream %s, head %s", show(r.Stream), r.Head)
	switch {
	case !r.Signed:
		b.WriteString(", not signed")
	default:
		signers := make([]string, len(r.Signers))
		for i, id := range r.Signers {
			signers[i] = id
			if n := r.SignerNodes[i]; n != "" {
				signers[i] += " (" + show(n) + ")"
			}
		}
		word := "keys"
		if len(signers) == 1 {
			word = "key"
		}
		fmt.Fprintf(&b, ", signed by %s %s", word, strings.Join(signers, ", "))
		if r.Pinned {
			b.WriteString(", trusted")
		} else {
			b.WriteString(", not pinned (the export's own keys)")
		}
	}
	if r.AnchoredAt > 0 {
		fmt.Fprintf(&b, ", anchored at link %d", r.AnchoredAt)
	}
	return b.String()
}

// Verify checks an export offline: it recomputes every link's hash from
// its content and checks, link by link in the export's order, the
// content, the numbering (a missing, reordered or inserted link), that
// each link names the one before it and the first none, that the last is
// the head and the count the head's, and for a signed chain every
// signature. The Report names the first bad link; the error is for an
// export it cannot read (an ErrFormat naming the line, or the reader's
// error).
//
// Verify holds about 150 bytes per link, never the links' content.
func Verify(r io.Reader, opts VerifyOptions) (*Report, error) {
	if opts.Head != "" {
		if err := CheckHash(opts.Head); err != nil {
			return nil, fmt.Errorf("provenance: trusted head: %w", err)
		}
	}
	for i, k := range opts.TrustedKeys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("provenance: trusted key %d is %d bytes, not an Ed25519 public key (%d)", i+1, len(k), ed25519.PublicKeySize)
		}
	}
	pr, err := NewReader(r, opts.Reader)
	if err != nil {
		return nil, err
	}
	h := pr.Header()
	v := newVerifier(h, opts)
	for {
		l, err := pr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		v.add(pr.Line(), l)
	}
	rep := &Report{Stream: h.Stream, Tenant: h.Tenant, Session: h.Session, Links: uint64(len(v.links)), Head: h.Head.Hash,
		Pinned: len(opts.TrustedKeys) > 0}
	rep.Problem = v.judge()
	if rep.Problem == nil && v.signed {
		rep.Signed = true
		for _, id := range v.signers {
			rep.Signers = append(rep.Signers, id)
			rep.SignerNodes = append(rep.SignerNodes, v.nodes[id])
		}
	}
	if rep.Problem == nil && opts.Head != "" {
		rep.Problem = v.anchor(opts.Head, &rep.AnchoredAt)
	}
	return rep, nil
}

// sigState is what a link's signature proved.
type sigState uint8

const (
	sigNone sigState = iota // no AI-Signature
	sigOK
	sigBad // the problem is in fact.sigDetail
)

// fact is what Verify keeps of one line: enough to judge its place in
// the chain, not its content.
type fact struct {
	line      int
	streamSeq uint64
	chainSeq  uint64   // 0: not a link (see local)
	hash      [32]byte // its AI-Hash
	hashed    bool     // hash is set
	prev      [32]byte
	hasPrev   bool
	// local is what is wrong with the line on its own (not a link,
	// another session's, content not matching its hash), reported as is
	// when the walk reaches it.
	local *Problem
	sig   sigState
	keyID string
	// sigDetail says why sig is sigBad.
	sigDetail string
}

type verifier struct {
	h        *ExportHeader
	keys     map[string]ed25519.PublicKey // by KeyID: the trusted ones, or the export's
	pinned   bool
	nodes    map[string]string // node of a key id, from the export
	ids      map[string]string // key ids seen, interned
	links    []fact
	signed   bool     // the chain must be signed
	signers  []string // key ids in order of first use (by judge)
	headHash [32]byte
	ranks    []uint8 // made by rank when first needed
}

func newVerifier(h *ExportHeader, opts VerifyOptions) *verifier {
	v := &verifier{h: h, keys: map[string]ed25519.PublicKey{}, nodes: map[string]string{}, ids: map[string]string{},
		pinned: len(opts.TrustedKeys) > 0, signed: h.Provenance == "signed" || len(opts.TrustedKeys) > 0}
	_, _ = hex.Decode(v.headHash[:], []byte(h.Head.Hash)) // checked by the Reader
	for _, k := range h.Keys {
		v.nodes[k.ID] = k.Node
	}
	if v.pinned {
		for _, k := range opts.TrustedKeys {
			v.keys[KeyID(k)] = k
		}
	} else {
		for _, k := range h.Keys {
			v.keys[k.ID] = k.PublicKey
		}
	}
	return v
}

// add keeps the facts of one link line.
func (v *verifier) add(line int, l *ExportLink) {
	f := fact{line: line, streamSeq: l.Seq}
	defer func() { v.links = append(v.links, f) }()
	local := func(kind Kind, format string, args ...any) {
		f.local = &Problem{Kind: kind, Link: f.chainSeq, StreamSeq: f.streamSeq, Line: line, Detail: fmt.Sprintf(format, args...)}
	}
	seqText, ok, dup := header(l.Headers, HdrChainSeq)
	switch {
	case dup:
		local(Inserted, "not a link: it has more than one %s", HdrChainSeq)
		return
	case !ok:
		local(Inserted, "not a link of a chain: it has no %s", HdrChainSeq)
		return
	}
	n, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil || n == 0 {
		local(Inserted, "not a link: %s %.32q is not a number from 1", HdrChainSeq, seqText)
		return
	}
	f.chainSeq = n
	hash, ok, dup := header(l.Headers, HdrHash)
	if !ok || dup || CheckHash(hash) != nil {
		local(Modified, "its %s is missing, repeated or not a hash", HdrHash)
		return
	}
	_, _ = hex.Decode(f.hash[:], []byte(hash))
	f.hashed = true
	prev, hasPrev, dup := header(l.Headers, HdrPrevHash)
	if dup || hasPrev && CheckHash(prev) != nil {
		local(Modified, "its %s is repeated or not a hash", HdrPrevHash)
		return
	}
	if hasPrev {
		f.hasPrev = true
		_, _ = hex.Decode(f.prev[:], []byte(prev))
	}
	if got := HashHex(&Link{Stream: v.h.Stream, Subject: l.Subject, Seq: n, Prev: prev, Header: l.Headers, Data: l.Data}); got != hash {
		local(Modified, "its content does not hash to its %s", HdrHash)
		return
	}
	// The session and tenant are content: a link whose hash holds is
	// another chain's.
	if s, _, _ := header(l.Headers, hdrSession); s != v.h.Session {
		local(Inserted, "it is a link of session %.64q, not %.64q", s, v.h.Session)
		return
	}
	if t, _, _ := header(l.Headers, hdrTenant); t != v.h.Tenant {
		local(Inserted, "it is a link of tenant %.64q, not %.64q", t, v.h.Tenant)
		return
	}
	v.checkSignature(&f, l, hash)
}

// checkSignature sets f's signature facts.
func (v *verifier) checkSignature(f *fact, l *ExportLink, hash string) {
	sig, ok, dup := header(l.Headers, HdrSignature)
	if !ok {
		return
	}
	v.signed = true // one signed link makes the chain one that must be
	f.sig = sigBad
	id, idOK, idDup := header(l.Headers, HdrKeyID)
	switch {
	case dup || idDup:
		f.sigDetail = fmt.Sprintf("it has more than one %s or %s", HdrSignature, HdrKeyID)
		return
	case !idOK:
		f.sigDetail = fmt.Sprintf("its signature names no key (no %s)", HdrKeyID)
		return
	}
	if s, ok := v.ids[id]; ok {
		id = s // one string per key, not one per link
	} else if len(v.ids) < MaxKeys {
		v.ids[id] = id
	}
	f.keyID = id
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		f.sigDetail = fmt.Sprintf("its %s is not base64", HdrSignature)
		return
	}
	pub, known := v.keys[id]
	switch {
	case !known && v.pinned && v.nodes[id] != "":
		f.sigDetail = fmt.Sprintf("key %s (node %s) is not one of the trusted keys", id, show(v.nodes[id]))
	case !known && v.pinned:
		f.sigDetail = fmt.Sprintf("key %s is not one of the trusted keys", showID(id))
	case !known:
		f.sigDetail = fmt.Sprintf("key %s is unknown: the export lists no such key", showID(id))
	case !VerifySignature(pub, hash, raw):
		f.sigDetail = fmt.Sprintf("the signature does not verify with key %s", id)
	default:
		f.sig = sigOK
	}
}

// showID is a key id from a link as a message shows it: quoted unless it
// is one (16 hex characters), so no line of the input can break the
// message's.
func showID(id string) string {
	if len(id) == 16 && CheckHash(id+strings.Repeat("0", 48)) == nil {
		return id
	}
	return fmt.Sprintf("%.32q", id)
}

// show is a name from the export as a message shows it: bare when it is
// short and plain, quoted otherwise.
func show(s string) string {
	if len(s) <= 64 && s != "" && strconv.Quote(s) == `"`+s+`"` && !strings.ContainsAny(s, " ,()") {
		return s
	}
	return fmt.Sprintf("%.64q", s)
}

// header is the value of the header name (any case) of h; dup when it
// has more than one.
func header(h map[string][]string, name string) (value string, ok, dup bool) {
	for k, vs := range h {
		if !strings.EqualFold(k, name) || len(vs) == 0 {
			continue
		}
		if ok || len(vs) > 1 {
			return vs[0], true, true
		}
		value, ok = vs[0], true
	}
	return value, ok, false
}
