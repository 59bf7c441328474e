// Package wire is the binary format that crosses the boundary between the broker and a WASM plugin, version 1
// (docs/plugins.md#the-abi). The host encodes a stage's input into the guest's memory and decodes the guest's
// output; the guest SDK (plugin/sdk) does the reverse. Both sides share this code, so the two cannot disagree.
//
// Every integer is a little-endian uint32; a string or byte field is its length followed by its bytes. A buffer
// starts with the version byte. Headers are a count of (name, value) pairs, a name repeated for each of its values.
//
//	message  = subject:str headers data:bytes
//	headers  = count:u32 (name:str value:str)*
//	input    = 0x01 message                      (ingress, filter)
//	         | 0x01 stream:str text:str           (tokens)
//	ingress  = 0x01 0x00                          pass
//	         | 0x01 0x01 reason:str               reject
//	         | 0x01 0x02 headers data:bytes       rewrite
//	         | 0x01 0x03 count:u32 message*       emit
//	tokens   = 0x01 0x00                          pass
//	         | 0x01 0x01 text:str                 rewrite
//	         | 0x01 0x02 reason:str               stop
//	         | 0x01 0x03 reason:str               flag
//
// The output decoders treat their input as hostile: every count and length is checked against what is left of the
// buffer and against the bounds below before anything is allocated. Their errors name fields by position, never
// quote them: what a plugin returns may hold the payload, and errors reach logs.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Version is the version byte every buffer starts with.
const Version = 1

// Bounds on what a plugin may return. A plugin's output beyond any of them is refused whole.
const (
	MaxOutputBytes = 1 << 20  // an output buffer, all its fields and framing together
	MaxMessages    = 64       // messages an ingress stage emits
	MaxHeaders     = 256      // header (name, value) pairs of one message
	MaxHeaderName  = 256      // bytes of a header name
	MaxHeaderValue = 16 << 10 // bytes of a header value
	MaxSubject     = 1024     // bytes of a subject
	MaxReason      = 1024     // bytes of a reject, stop or flag reason
)

// The fewest bytes an item can take, so a count is checked against the bytes left before anything is allocated.
const (
	headerPairBytes = 8  // a pair's two length prefixes
	messageMinBytes = 12 // subject length, header count, payload length
)

// ABIVersion is what a plugin's semaq_abi_version export returns: the version of the exports, their signatures
// and this format together.
const ABIVersion = 1

// Stage bits of the optional semaq_stages export, which names the stages a module implements when it exports more
// stage functions than that (as the SDK does).
const (
	StageIngress = 1 << iota
	StageFilter
	StageTokens
)

// Ingress actions.
const (
	IngressPass    byte = 0
	IngressReject  byte = 1
	IngressRewrite byte = 2
	IngressEmit    byte = 3
)

// Tokens actions.
const (
	TokensPass    byte = 0
	TokensRewrite byte = 1
	TokensStop    byte = 2
	TokensFlag    byte = 3
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("malformed plugin data")

// Message is a message on the wire.
type Message struct {
	Subject string
	Header  map[string][]string
	Data    []byte
}

// Ingress is an ingress stage's decoded output.
type Ingress struct {
	Action   byte
	Reason   string              // IngressReject
	Header   map[string][]string // IngressRewrite
	Data     []byte              // IngressRewrite
	Messages []Message           // IngressEmit
}

// Tokens is a tokens stage's decoded output.
type Tokens struct {
	Action byte
	Text   string // TokensRewrite
	Reason string // TokensStop, TokensFlag
}

// Encoding.

func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

func appendStr(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes(b, s []byte) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

// AppendHeaders appends h as a count and (name, value) pairs.
func AppendHeaders(b []byte, h map[string][]string) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = appendU32(b, uint32(n))
	for k, vs := range h {
		for _, v := range vs {
			b = appendStr(b, k)
			b = appendStr(b, v)
		}
	}
	return b
}

func appendMessage(b []byte, m *Message) []byte {
	b = appendStr(b, m.Subject)
	b = AppendHeaders(b, m.Header)
	return appendBytes(b, m.Data)
}

// AppendMessageInput appends the input of an ingress or filter stage.
func AppendMessageInput(b []byte, m *Message) []byte {
	return appendMessage(append(b, Version), m)
}

// AppendTokensInput appends the input of a tokens stage.
func AppendTokensInput(b []byte, stream, text string) []byte {
	b = appendStr(append(b, Version), stream)
	return appendStr(b, text)
}

// MessageInputSize is the length AppendMessageInput will add, so the host can ask the guest for the room first.
func MessageInputSize(m *Message) int {
	n := 1 + 4 + len(m.Subject) + 4 + 4 + len(m.Data)
	for k, vs := range m.Header {
		n += len(vs) * (headerPairBytes + len(k))
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// AppendIngress appends an ingress stage's output.
func AppendIngress(b []byte, out *Ingress) []byte {
	b = append(b, Version, out.Action)
	switch out.Action {
	case IngressReject:
		b = appendStr(b, out.Reason)
	case IngressRewrite:
		b = AppendHeaders(b, out.Header)
		b = appendBytes(b, out.Data)
	case IngressEmit:
		b = appendU32(b, uint32(len(out.Messages)))
		for i := range out.Messages {
			b = appendMessage(b, &out.Messages[i])
		}
	}
	return b
}

// AppendTokens appends a tokens stage's output.
func AppendTokens(b []byte, out *Tokens) []byte {
	b = append(b, Version, out.Action)
	switch out.Action {
	case TokensRewrite:
		b = appendStr(b, out.Text)
	case TokensStop, TokensFlag:
		b = appendStr(b, out.Reason)
	}
	return b
}

// Decoding.

// reader reads fields off a buffer, remembering the first error so callers check once.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrMalformed, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) byte1(what string) byte {
	if r.err != nil {
		return 0
	}
	if r.left() < 1 {
		r.fail("%s: buffer ends", what)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) u32(what string) uint32 {
	if r.err != nil {
		return 0
	}
	if r.left() < 4 {
		r.fail("%s: buffer ends", what)
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

// field returns the next length-prefixed field, refusing one longer than max or than the buffer holds. The slice
// aliases the buffer: callers copy what they keep.
func (r *reader) field(what string, max int) []byte {
	n := r.u32(what + " length")
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(max) {
		r.fail("%s is %d bytes, more than the %d allowed", what, n, max)
		return nil
	}
	if uint64(n) > uint64(r.left()) {
		r.fail("%s is %d bytes, but only %d are left", what, n, r.left())
		return nil
	}
	f := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return f
}

// count reads a count of items, each at least min bytes, refusing more than max or than the buffer could hold.
func (r *reader) count(what string, max, min int) int {
	n := r.u32(what)
	if r.err != nil {
		return 0
	}
	if uint64(n) > uint64(max) {
		r.fail("%d %s, more than the %d allowed", n, what, max)
		return 0
	}
	if uint64(n)*uint64(min) > uint64(r.left()) {
		r.fail("%d %s cannot fit in the %d bytes left", n, what, r.left())
		return 0
	}
	return int(n)
}

func (r *reader) end() {
	if r.err == nil && r.left() != 0 {
		r.fail("%d bytes left over", r.left())
	}
}

func (r *reader) version() {
	if v := r.byte1("version"); r.err == nil && v != Version {
		r.fail("version %d, want %d", v, Version)
	}
}

// headers reads a header block. check refuses names and values a NATS header could not carry; the guest, which
// trusts the host, decodes without it.
func (r *reader) headers(check bool) map[string][]string {
	n := r.count("header pairs", MaxHeaders, headerPairBytes)
	if r.err != nil || n == 0 {
		return nil
	}
	h := make(map[string][]string, n)
	for i := range n {
		k := r.field("header name", MaxHeaderName)
		v := r.field("header value", MaxHeaderValue)
		if r.err != nil {
			return nil
		}
		if check {
			if msg := checkHeaderName(k); msg != "" {
				r.fail("header name %d %s", i+1, msg)
				return nil
			}
			if msg := checkHeaderValue(v); msg != "" {
				r.fail("header value %d %s", i+1, msg)
				return nil
			}
		}
		key := string(k)
		h[key] = append(h[key], string(v))
	}
	return h
}

func (r *reader) message(check bool, m *Message) {
	s := r.field("subject", MaxSubject)
	if check && r.err == nil {
		if msg := checkSubject(s); msg != "" {
			r.fail("subject %s", msg)
		}
	}
	m.Subject = string(s)
	m.Header = r.headers(check)
	d := r.field("payload", MaxOutputBytes)
	if r.err == nil {
		m.Data = append([]byte(nil), d...)
	}
}

func (r *reader) reason() string {
	s := r.field("reason", MaxReason)
	if r.err == nil && strings.ContainsAny(string(s), "\r\n\x00") {
		r.fail("reason holds a line break or NUL")
	}
	return string(s)
}

// DecodeIngress decodes an ingress stage's output, refusing anything past the bounds or malformed.
func DecodeIngress(b []byte) (*Ingress, error) {
	if len(b) > MaxOutputBytes {
		return nil, fmt.Errorf("%w: output is %d bytes, more than the %d allowed", ErrMalformed, len(b), MaxOutputBytes)
	}
	r := &reader{b: b}
	r.version()
	out := &Ingress{Action: r.byte1("action")}
	if r.err != nil {
		return nil, r.err
	}
	switch out.Action {
	case IngressPass:
	case IngressReject:
		out.Reason = r.reason()
	case IngressRewrite:
		out.Header = r.headers(true)
		d := r.field("payload", MaxOutputBytes)
		if r.err == nil {
			out.Data = append([]byte(nil), d...)
		}
	case IngressEmit:
		n := r.count("messages", MaxMessages, messageMinBytes)
		if n > 0 {
			out.Messages = make([]Message, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			r.message(true, &out.Messages[i])
		}
	default:
		r.fail("unknown ingress action %d", out.Action)
	}
	r.end()
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// DecodeTokens decodes a tokens stage's output. A rewritten text may be as long as the whole output allows.
func DecodeTokens(b []byte) (*Tokens, error) {
	if len(b) > MaxOutputBytes {
		return nil, fmt.Errorf("%w: output is %d bytes, more than the %d allowed", ErrMalformed, len(b), MaxOutputBytes)
	}
	r := &reader{b: b}
	r.version()
	out := &Tokens{Action: r.byte1("action")}
	if r.err != nil {
		return nil, r.err
	}
	switch out.Action {
	case TokensPass:
	case TokensRewrite:
		out.Text = string(r.field("text", MaxOutputBytes))
	case TokensStop, TokensFlag:
		out.Reason = r.reason()
	default:
		r.fail("unknown tokens action %d", out.Action)
	}
	r.end()
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// DecodeMessageInput decodes the input of an ingress or filter stage (the guest's side). The host is trusted for
// content but counts are still checked against the buffer, so a bad buffer cannot make the guest allocate.
func DecodeMessageInput(b []byte) (*Message, error) {
	r := &reader{b: b}
	r.version()
	m := &Message{}
	r.message(false, m)
	r.end()
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// DecodeTokensInput decodes the input of a tokens stage (the guest's side).
func DecodeTokensInput(b []byte) (stream, text string, err error) {
	r := &reader{b: b}
	r.version()
	stream = string(r.field("stream", len(b)))
	text = string(r.field("text", len(b)))
	r.end()
	return stream, text, r.err
}

// checkHeaderName refuses a name NATS would misread: empty, or holding a control byte, space or colon.
func checkHeaderName(k []byte) string {
	if len(k) == 0 {
		return "is empty"
	}
	for _, c := range k {
		if c <= ' ' || c == ':' || c == 0x7f {
			return "holds a space, colon or control byte"
		}
	}
	return ""
}

// checkHeaderValue refuses a value that would end its header line early.
func checkHeaderValue(v []byte) string {
	for _, c := range v {
		if c == '\r' || c == '\n' || c == 0 {
			return "holds a line break or NUL"
		}
	}
	return ""
}

// checkSubject refuses a subject nobody could publish to: empty, with an empty token, a wildcard or whitespace.
// The broker applies its own rules (reserved subjects, permissions) to what a plugin emits after this.
func checkSubject(s []byte) string {
	if len(s) == 0 {
		return "is empty"
	}
	tokenStart := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			tok := s[tokenStart:i]
			if len(tok) == 0 {
				return "has an empty token"
			}
			if len(tok) == 1 && (tok[0] == '*' || tok[0] == '>') {
				return "has a wildcard"
			}
			tokenStart = i + 1
			continue
		}
		if c := s[i]; c <= ' ' || c == 0x7f {
			return "holds whitespace or a control byte"
		}
	}
	return ""
}
