package provenance

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// FormatVersion is the export format's version: the header's
// "semaq_provenance" field.
const FormatVersion = 1

// The bounds a Reader applies unless its ReaderOptions say otherwise.
const (
	// DefaultMaxLineBytes bounds a link's line: a 12 MiB payload in base64
	// with its headers fits.
	DefaultMaxLineBytes = 16 << 20
	// DefaultMaxLinks bounds the links of one export.
	DefaultMaxLinks = 1 << 20
	// MaxHeaderBytes bounds the header line.
	MaxHeaderBytes = 1 << 20
	// MaxKeys bounds the keys a header lists.
	MaxKeys = 1024
	// maxLineBytesLimit is the most ReaderOptions.MaxLineBytes may say: a
	// 64 MiB message (the broker's largest max_payload) in base64, with room
	// for its headers.
	maxLineBytesLimit = 96 << 20
)

// ExportHeader is an export's first line: which chain, its head when it
// was exported, and the signing keys of the cluster's nodes.
type ExportHeader struct {
	// Version is FormatVersion; a Writer sets it.
	Version int    `json:"semaq_provenance"`
	Stream  string `json:"stream"`
	Tenant  string `json:"tenant,omitempty"`
	Session string `json:"session"`
	// Provenance is the stream's mode, "session" or "signed", when the
	// exporter knew it. A verifier requires every link of a "signed"
	// export to be signed.
	Provenance string      `json:"provenance,omitempty"`
	Head       ExportHead  `json:"head"`
	Keys       []ExportKey `json:"keys"`
	Exported   time.Time   `json:"exported"`
}

// ExportHead is the chain's head record when the export began.
type ExportHead struct {
	Hash  string    `json:"hash"`  // the last link's hash
	Links uint64    `json:"links"` // how many links the chain has
	First time.Time `json:"first"` // when the first link was received
	Last  time.Time `json:"last"`  // when the last link was received
	Seq   uint64    `json:"seq"`   // the head record's stream sequence
}

// ExportKey is a node's signing key.
type ExportKey struct {
	ID        string `json:"id"` // KeyID(PublicKey)
	Node      string `json:"node"`
	PublicKey []byte `json:"public_key"` // Ed25519, 32 bytes; base64 in JSON
}

// ExportLink is one stored message of the chain, as the stream holds it.
type ExportLink struct {
	Seq     uint64              `json:"seq"` // stream sequence
	Subject string              `json:"subject"`
	Time    time.Time           `json:"time"` // when the stream stored it
	Headers map[string][]string `json:"headers"`
	Data    []byte              `json:"data"` // base64 in JSON
}

// Writer writes an export: NewWriter the header, WriteLink each link in
// stream order, Flush at the end. Not safe for concurrent use.
type Writer struct {
	bw    *bufio.Writer
	enc   *json.Encoder
	links int
	err   error // sticky
}

// NewWriter checks h and writes it as the export's first line. It sets
// h.Version.
func NewWriter(w io.Writer, h *ExportHeader) (*Writer, error) {
	h.Version = FormatVersion
	if err := checkHeader(h); err != nil {
		return nil, fmt.Errorf("provenance: export header: %w", err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	pw := &Writer{bw: bw, enc: enc}
	if h.Keys == nil {
		h.Keys = []ExportKey{} // [] rather than null: the field is always there
	}
	if err := enc.Encode(h); err != nil {
		return nil, fmt.Errorf("provenance: writing export header: %w", err)
	}
	return pw, nil
}

// WriteLink writes one link.
func (w *Writer) WriteLink(l *ExportLink) error {
	if w.err != nil {
		return w.err
	}
	if l.Data == nil {
		c := *l
		c.Data = []byte{} // "" rather than null
		l = &c
	}
	if err := w.enc.Encode(l); err != nil {
		w.err = fmt.Errorf("provenance: writing link at stream seq %d: %w", l.Seq, err)
		return w.err
	}
	w.links++
	return nil
}

// Links is how many links were written.
func (w *Writer) Links() int { return w.links }

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("provenance: writing export: %w", err)
	}
	return w.err
}

// ReaderOptions bound what a Reader accepts; zero fields take the
// defaults.
type ReaderOptions struct {
	// MaxLineBytes bounds a link's line (DefaultMaxLineBytes; at most
	// 96 MiB).
	MaxLineBytes int
	// MaxLinks bounds the links (DefaultMaxLinks).
	MaxLinks int
}

// Reader reads an export, line by line: it holds one line at a time, so
// its memory is bounded by MaxLineBytes whatever the input. It is strict:
// unknown fields, an unknown version, blank lines and trailing data are
// refused with a *FormatError naming the line. Not safe for concurrent
// use.
type Reader struct {
	br     *bufio.Reader
	opts   ReaderOptions
	header ExportHeader
	line   int // of the last line read
	links  int
	buf    []byte
	err    error // sticky
}

// NewReader reads and checks the export's header (line 1).
func NewReader(r io.Reader, opts ReaderOptions) (*Reader, error) {
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = DefaultMaxLineBytes
	}
	if opts.MaxLineBytes > maxLineBytesLimit {
		return nil, fmt.Errorf("provenance: ReaderOptions.MaxLineBytes %d is over %d", opts.MaxLineBytes, maxLineBytesLimit)
	}
	if opts.MaxLinks <= 0 {
		opts.MaxLinks = DefaultMaxLinks
	}
	pr := &Reader{br: bufio.NewReaderSize(r, 64<<10), opts: opts}
	line, err := pr.readLine(MaxHeaderBytes)
	if errors.Is(err, io.EOF) {
		return nil, formatErr(1, "empty input: an export starts with its header line")
	}
	if err != nil {
		return nil, err
	}
	// The version first, so a later format's new fields are reported as
	// a version this reader does not know, not as unknown fields.
	var v struct {
		Version *int `json:"semaq_provenance"`
	}
	if t := bytes.TrimLeft(line, " \t"); len(t) == 0 || t[0] != '{' {
		return nil, formatErr(1, "not a SemaQ provenance export: line 1 is not its JSON header")
	}
	if err := json.NewDecoder(bytes.NewReader(line)).Decode(&v); err != nil {
		return nil, formatErr(1, "not a SemaQ provenance export: line 1 is not its JSON header (%v)", err)
	}
	switch {
	case v.Version == nil:
		return nil, formatErr(1, "not a SemaQ provenance export: the header has no semaq_provenance field")
	case *v.Version != FormatVersion:
		return nil, formatErr(1, "export format version %d is not one this reader knows (%d)", *v.Version, FormatVersion)
	}
	if err := decodeStrict(line, &pr.header); err != nil {
		return nil, formatErr(1, "header: %v", err)
	}
	if err := checkHeader(&pr.header); err != nil {
		return nil, formatErr(1, "header: %v", err)
	}
	if pr.header.Head.Links > uint64(opts.MaxLinks) {
		return nil, formatErr(1, "the head says %d links, more than this reader takes (%d; ReaderOptions.MaxLinks)",
			pr.header.Head.Links, opts.MaxLinks)
	}
	return pr, nil
}

// Header is the export's header.
func (r *Reader) Header() *ExportHeader { return &r.header }

// Line is the line of the link Next returned last.
func (r *Reader) Line() int { return r.line }

// Next returns the next link, or io.EOF after the last.
func (r *Reader) Next() (*ExportLink, error) {
	if r.err != nil {
		return nil, r.err
	}
	line, err := r.readLine(r.opts.MaxLineBytes)
	if err != nil {
		r.err = err
		return nil, err
	}
	if r.links >= r.opts.MaxLinks {
		r.err = formatErr(r.line, "more than %d links (ReaderOptions.MaxLinks)", r.opts.MaxLinks)
		return nil, r.err
	}
	var l ExportLink
	if err := decodeStrict(line, &l); err != nil {
		r.err = formatErr(r.line, "link: %v", err)
		return nil, r.err
	}
	if err := checkLink(&l); err != nil {
		r.err = formatErr(r.line, "link at stream seq %d: %v", l.Seq, err)
		return nil, r.err
	}
	r.links++
	return &l, nil
}

// readLine reads the next line, without its end ("\n" or "\r\n"), into
// r.buf. A line over max bytes is refused before more of it is read.
func (r *Reader) readLine(max int) ([]byte, error) {
	r.buf = r.buf[:0]
	r.line++
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(r.buf)+len(frag) > max+2 { // +2: the line's end
			return nil, formatErr(r.line, "line is longer than %d bytes", max)
		}
		r.buf = append(r.buf, frag...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			if len(r.buf) == 0 {
				r.line--
				return nil, io.EOF
			}
			break // a last line without its newline
		}
		return nil, fmt.Errorf("provenance: reading line %d: %w", r.line, err)
	}
	line := bytes.TrimSuffix(r.buf, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > max {
		return nil, formatErr(r.line, "line is longer than %d bytes", max)
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return nil, formatErr(r.line, "blank line: every line of an export is one JSON object")
	}
	return line, nil
}

// decodeStrict decodes one JSON object, refusing unknown fields, other
// JSON values and anything after the object.
func decodeStrict(line []byte, v any) error {
	if t := bytes.TrimLeft(line, " \t"); len(t) == 0 || t[0] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errors.New("the JSON object ends early: a line cut short?")
		}
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}

func checkHeader(h *ExportHeader) error {
	switch {
	case h.Stream == "":
		return errors.New("no stream")
	case h.Session == "":
		return errors.New("no session")
	case h.Provenance != "" && h.Provenance != "session" && h.Provenance != "signed":
		return fmt.Errorf("provenance %.64q is not one of session, signed", h.Provenance)
	case h.Head.Links == 0:
		return errors.New("head.links is 0: a chain has at least one link")
	case len(h.Keys) > MaxKeys:
		return fmt.Errorf("%d keys, more than %d", len(h.Keys), MaxKeys)
	}
	if err := CheckHash(h.Head.Hash); err != nil {
		return fmt.Errorf("head.hash: %w", err)
	}
	seen := make(map[string]bool, len(h.Keys))
	for i, k := range h.Keys {
		if len(k.PublicKey) != ed25519.PublicKeySize {
			return fmt.Errorf("key %d (%.32q): public_key is %d bytes, not %d", i+1, k.ID, len(k.PublicKey), ed25519.PublicKeySize)
		}
		if id := KeyID(k.PublicKey); k.ID != id {
			return fmt.Errorf("key %d: id %.32q is not the id of its public key (%s)", i+1, k.ID, id)
		}
		if seen[k.ID] {
			return fmt.Errorf("key %d: id %s listed twice", i+1, k.ID)
		}
		seen[k.ID] = true
	}
	return nil
}

func checkLink(l *ExportLink) error {
	switch {
	case l.Seq == 0:
		return errors.New("no stream seq (seq)")
	case l.Subject == "":
		return errors.New("no subject")
	}
	return nil
}
