package semaq

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Envelope is the parsed semantic envelope of one message. Zero values mean
// "not given", except Priority, which defaults to PriorityDefault.
type Envelope struct {
	Model        string
	ModelVersion string
	Adapter      string
	Priority     Priority
	Tenant       string
	Intent       string
	Session      string
	// Timeout is the relative budget the sender gave (AI-Timeout).
	Timeout time.Duration
	// Deadline is the absolute deadline: AI-Deadline, or the receive time
	// plus Timeout, whichever is earlier. Zero when neither was given.
	Deadline time.Time
	// PromptTokens is -1 when the sender did not say.
	PromptTokens int
	SchemaID     int64
	TraceParent  string
	TraceState   string
	MsgID        string
	TTL          string
}

// EnvelopeError reports one invalid envelope header. It matches
// ErrBadEnvelope with errors.Is.
type EnvelopeError struct {
	Header string // the header as the sender spelled it
	Reason string
}

func (e *EnvelopeError) Error() string {
	if validName(e.Header) >= 0 || e.Header == "" {
		// A name that is no header name is shown quoted, so a hostile one
		// cannot forge lines in a log or a response.
		return fmt.Sprintf("invalid header %q: %s", e.Header, e.Reason)
	}
	return fmt.Sprintf("invalid header %s: %s", e.Header, e.Reason)
}

// Is reports whether target is ErrBadEnvelope.
func (e *EnvelopeError) Is(target error) bool { return target == ErrBadEnvelope }

// ErrBadEnvelope is matched by every envelope validation error.
var ErrBadEnvelope = errors.New("semaq: invalid envelope")

// NormalizeOptions tunes Normalize. The zero value uses the defaults.
type NormalizeOptions struct {
	// MaxHeaderBytes bounds the whole header block; 0 means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// Stamp, when true, sets AI-Received to Now.
	Stamp bool
}

// field identifies an envelope header.
type field uint8

const (
	fNone field = iota
	fModel
	fModelVersion
	fAdapter
	fPriority
	fTenant
	fIntent
	fTimeout
	fDeadline
	fSession
	fPromptTokens
	fSchemaID
	fTraceParent
	fTraceState
	fTraceID // alias only: X-Trace-ID
	fMsgID
	fTTL
	fReceived // the last envelope header; JetStream's conditions follow
	fExpectedStream
	fExpectedLastSeq
	fExpectedLastSubjSeq
	fExpectedLastSubjSeqSubj
	fExpectedLastMsgID
	nFields
	// fReserved is a header a client may not set; it has no slot in the
	// per-field arrays.
	fReserved = nFields
)

var canonical = [...]string{
	fModel: HdrModel, fModelVersion: HdrModelVersion, fAdapter: HdrAdapter,
	fPriority: HdrPriority, fTenant: HdrTenant, fIntent: HdrIntent,
	fTimeout: HdrTimeout, fDeadline: HdrDeadline, fSession: HdrSession,
	fPromptTokens: HdrPromptTokens, fSchemaID: HdrSchemaID,
	fTraceParent: HdrTraceParent, fTraceState: HdrTraceState, fTraceID: AliasTraceID,
	fMsgID: HdrMsgID, fTTL: HdrTTL, fReceived: HdrReceived,
	fExpectedStream: HdrExpectedStream, fExpectedLastSeq: HdrExpectedLastSeq,
	fExpectedLastSubjSeq: HdrExpectedLastSubjSeq, fExpectedLastSubjSeqSubj: HdrExpectedLastSubjSeqSubj,
	fExpectedLastMsgID: HdrExpectedLastMsgID,
}

// names maps every accepted spelling (lower case) to its field.
var names = map[string]field{
	"ai-model": fModel, "ai-model-version": fModelVersion, "ai-adapter": fAdapter,
	"ai-priority": fPriority, "ai-tenant": fTenant, "ai-intent": fIntent,
	"ai-timeout": fTimeout, "ai-deadline": fDeadline, "ai-session": fSession,
	"ai-prompt-tokens": fPromptTokens, "ai-schema-id": fSchemaID,
	"traceparent": fTraceParent, "tracestate": fTraceState,
	"nats-msg-id": fMsgID, "nats-ttl": fTTL, "ai-received": fReceived,

	"x-model-version": fModelVersion, "x-lora-adapter-id": fAdapter,
	"x-ai-intent": fIntent, "x-ai-timeout": fTimeout, "x-trace-id": fTraceID,

	"nats-expected-stream": fExpectedStream, "nats-expected-last-sequence": fExpectedLastSeq,
	"nats-expected-last-subject-sequence":         fExpectedLastSubjSeq,
	"nats-expected-last-subject-sequence-subject": fExpectedLastSubjSeqSubj,
	"nats-expected-last-msg-id":                   fExpectedLastMsgID,
}

// maxNameLen is the longest name in names.
const maxNameLen = len("nats-expected-last-subject-sequence-subject")

// lookup classifies a header name without allocating for the common case of
// names that are not envelope headers.
func lookup(name string) field {
	// Every envelope name starts with a, n, t or x, every reserved one with
	// n, s, d or k; anything else is a user header and costs one comparison.
	if name == "" {
		return fNone
	}
	switch name[0] | 0x20 {
	case 'a', 'n', 't', 'x':
	case 's':
		return reservedIf(strings.EqualFold(name, HdrStatus))
	case 'd':
		return reservedIf(strings.EqualFold(name, HdrDescription))
	case 'k':
		return reservedIf(strings.EqualFold(name, HdrKVOperation))
	default:
		return fNone
	}
	if len(name) > maxNameLen {
		return reservedIf(hasNatsPrefix(name))
	}
	var buf [maxNameLen]byte
	b := buf[:len(name)]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	if f, ok := names[string(b)]; ok { // the compiler does not allocate for this lookup
		return f
	}
	return reservedIf(hasNatsPrefix(name))
}

func reservedIf(reserved bool) field {
	if reserved {
		return fReserved
	}
	return fNone
}

func hasNatsPrefix(name string) bool {
	return len(name) >= len(ReservedNatsPrefix) && strings.EqualFold(name[:len(ReservedNatsPrefix)], ReservedNatsPrefix)
}

// IsEnvelopeHeader reports whether name (any case, aliases included) is one
// of the envelope headers in docs/envelope.md, Nats-Msg-Id and Nats-TTL
// included. JetStream's Nats-Expected-* conditions are not envelope headers.
func IsEnvelopeHeader(name string) bool {
	f := lookup(name)
	return f != fNone && f <= fReceived
}

// IsReservedHeader reports whether name (any case) is a header a client may
// not set: Status and Description (nats.go's pseudo-headers for a status
// line), KV-Operation, and every Nats- header except Nats-Msg-Id, Nats-TTL
// and the Nats-Expected-* conditions JetStream documents.
func IsReservedHeader(name string) bool { return lookup(name) == fReserved }

// CheckHeaders checks what Normalize checks beyond the envelope: every name
// is visible ASCII without ':', no value holds CR, LF or NUL, and no header
// is reserved (IsReservedHeader). Normalize runs these checks itself; front
// doors that build a header block may call CheckHeaders to refuse earlier.
// It does not allocate when h is accepted.
func CheckHeaders(h map[string][]string) error {
	for name, vals := range h {
		if err := checkHeader(name, vals, lookup(name)); err != nil {
			return err
		}
	}
	return nil
}

// checkHeader applies the wire-format and reserved-name rules to one header.
func checkHeader(name string, vals []string, f field) error {
	if f == fReserved {
		return &EnvelopeError{name, reservedReason(name)}
	}
	if name == "" {
		return &EnvelopeError{name, "empty header name"}
	}
	if i := validName(name); i >= 0 {
		return &EnvelopeError{name, fmt.Sprintf("header name has %q at byte %d; names are visible ASCII without ':'", name[i], i)}
	}
	for _, v := range vals {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c <= '\r' && (c == '\r' || c == '\n' || c == 0) {
				return &EnvelopeError{name, fmt.Sprintf("value has %q at byte %d; a header value may not hold CR, LF or NUL", c, i)}
			}
		}
	}
	return nil
}

// validName returns the index of the first byte of name that may not be in
// a header name, or -1.
func validName(name string) int {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return i
		}
	}
	return -1
}

func reservedReason(name string) string {
	switch {
	case strings.EqualFold(name, HdrStatus), strings.EqualFold(name, HdrDescription):
		return "reserved: a NATS status pseudo-header (a status line such as NATS/1.0 409); readers would take the message for a protocol status"
	case strings.EqualFold(name, HdrKVOperation):
		return "reserved: marks key-value deletes and purges"
	}
	return "reserved: nats-server gives Nats- headers a meaning; a client may set only Nats-Msg-Id, Nats-TTL and " +
		"Nats-Expected-Stream, -Last-Sequence, -Last-Subject-Sequence, -Last-Subject-Sequence-Subject, -Last-Msg-Id"
}

// Parse validates the envelope headers of h without changing h.
func Parse(h map[string][]string, now time.Time) (Envelope, error) {
	return parse(h, now, NormalizeOptions{}, false)
}

// Normalize validates the headers of h for storage and rewrites h in place.
// Beyond the envelope it refuses what CheckHeaders refuses (reserved headers,
// status pseudo-headers, names and values that break the wire format) and
// checks JetStream's Nats-Expected-* conditions. Aliases and other spellings
// become the canonical names, the priority is
// stored as its digit, AI-Deadline is derived from AI-Timeout and now, a
// traceparent is made from X-Trace-ID, and (with opts.Stamp) AI-Received is
// set. On error h may be partly rewritten and must not be stored.
func Normalize(h map[string][]string, now time.Time, opts NormalizeOptions) (Envelope, error) {
	return parse(h, now, opts, true)
}

func parse(h map[string][]string, now time.Time, opts NormalizeOptions, rewrite bool) (Envelope, error) {
	env := Envelope{Priority: PriorityDefault, PromptTokens: -1}
	maxHdr := opts.MaxHeaderBytes
	if maxHdr <= 0 {
		maxHdr = DefaultMaxHeaderBytes
	}
	var (
		seen     [nFields]string // the spelling each field was given under
		renames  [nFields]struct{ from, to string }
		nRenames int
		total    int
		biggest  string
		bigSize  int
		deadline time.Time
		traceID  string
	)
	for name, vals := range h {
		size := 0
		for _, v := range vals {
			size += len(name) + len(v) + 4 // "name: value\r\n"
		}
		total += size
		if size > bigSize {
			biggest, bigSize = name, size
		}
		f := lookup(name)
		if rewrite {
			// The ingress stores what it accepts; a reader parses what was
			// stored or what the server added (Nats-Stream on a direct get).
			if err := checkHeader(name, vals, f); err != nil {
				return env, err
			}
		}
		if f == fNone || f == fReserved {
			continue
		}
		if seen[f] != "" {
			return env, &EnvelopeError{name, fmt.Sprintf("given twice (also as %s)", seen[f])}
		}
		seen[f] = name
		if len(vals) != 1 {
			return env, &EnvelopeError{name, fmt.Sprintf("given %d times; one value expected", len(vals))}
		}
		v := vals[0]
		if f != fReceived && len(v) > MaxEnvelopeValue && f != fTraceState {
			return env, &EnvelopeError{name, fmt.Sprintf("value is %d bytes; the limit is %d", len(v), MaxEnvelopeValue)}
		}
		var err error
		switch f {
		case fModel:
			env.Model, err = token(v)
		case fModelVersion:
			env.ModelVersion, err = token(v)
		case fAdapter:
			env.Adapter, err = token(v)
		case fTenant:
			env.Tenant, err = token(v)
		case fIntent:
			env.Intent, err = token(v)
		case fSession:
			env.Session, err = token(v)
		case fMsgID:
			env.MsgID, err = token(v)
		case fPriority:
			env.Priority, err = ParsePriority(v)
			if err == nil && rewrite && v != env.Priority.String() {
				h[name][0] = env.Priority.String()
			}
		case fTimeout:
			env.Timeout, err = parseTimeout(v)
		case fDeadline:
			deadline, err = time.Parse(time.RFC3339Nano, v)
			if err != nil {
				err = fmt.Errorf("%q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", v)
			}
		case fPromptTokens:
			env.PromptTokens, err = parseCount(v, MaxPromptTokens)
		case fSchemaID:
			var n uint64
			n, err = parseDecimal(v, MaxSchemaID)
			env.SchemaID = int64(n)
		case fTraceParent:
			err = checkTraceParent(v)
			env.TraceParent = v
		case fTraceState:
			if len(v) > 512 {
				err = fmt.Errorf("value is %d bytes; the limit is 512", len(v))
			}
			env.TraceState = v
		case fTraceID:
			traceID, err = checkTraceID(v)
		case fTTL:
			err = checkTTL(v)
			env.TTL = v
		case fReceived:
			// Overwritten below when stamping; otherwise carried as is.
		case fExpectedStream, fExpectedLastMsgID:
			_, err = token(v)
		case fExpectedLastSeq, fExpectedLastSubjSeq:
			_, err = parseDecimal(v, MaxExpectedSeq)
		case fExpectedLastSubjSeqSubj:
			err = CheckSubject(v, true)
		}
		if err != nil {
			return env, &EnvelopeError{name, err.Error()}
		}
		if rewrite && f != fTraceID && name != canonical[f] {
			renames[nRenames] = struct{ from, to string }{name, canonical[f]}
			nRenames++
		}
	}
	if total > maxHdr {
		return env, &EnvelopeError{biggest, fmt.Sprintf("headers total %d bytes; the limit is %d (this one is the largest, %d bytes)", total, maxHdr, bigSize)}
	}

	if traceID != "" {
		if env.TraceParent != "" {
			if env.TraceParent[3:35] != traceID {
				return env, &EnvelopeError{seen[fTraceID], "trace id differs from the one in traceparent"}
			}
		} else {
			env.TraceParent = "00-" + traceID + "-" + spanID() + "-01"
		}
	}
	if env.Timeout > 0 {
		env.Deadline = now.Add(env.Timeout)
	}
	if !deadline.IsZero() && (env.Deadline.IsZero() || deadline.Before(env.Deadline)) {
		env.Deadline = deadline
	}

	if !rewrite {
		return env, nil
	}
	for _, r := range renames[:nRenames] {
		h[r.to] = h[r.from]
		delete(h, r.from)
	}
	if traceID != "" {
		delete(h, seen[fTraceID])
		if seen[fTraceParent] == "" {
			h[HdrTraceParent] = []string{env.TraceParent}
		}
	}
	if !env.Deadline.IsZero() && (seen[fDeadline] == "" || !env.Deadline.Equal(deadline)) {
		h[HdrDeadline] = []string{env.Deadline.UTC().Format(time.RFC3339Nano)}
	}
	if opts.Stamp {
		h[HdrReceived] = []string{now.UTC().Format(time.RFC3339Nano)}
	}
	return env, nil
}

// token accepts visible ASCII without spaces: model names, tenant ids,
// session ids. Anything else is almost always a client bug (a stray newline,
// an unexpanded template).
func token(v string) (string, error) {
	if v == "" {
		return "", errors.New("empty value")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%q has a character outside visible ASCII at byte %d", v, i)
		}
	}
	return v, nil
}

func parseCount(v string, max uint64) (int, error) {
	n, err := parseDecimal(v, max)
	return int(n), err
}

// parseDecimal accepts only the canonical decimal form of a number from 0
// to max: digits, no sign, no leading zero, no spaces. What it accepts is
// stored unchanged, so every stored numeric header reads the same to every
// parser (strconv, JetStream's own, a JavaScript SDK).
func parseDecimal(v string, max uint64) (uint64, error) {
	if v == "" {
		return 0, errors.New("empty value; a non-negative integer expected")
	}
	if !allDigits(v) {
		return 0, fmt.Errorf("%q is not a non-negative integer (digits only: no sign, space, point or exponent)", v)
	}
	if len(v) > 1 && v[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero; write it without", v)
	}
	var n uint64
	for i := 0; i < len(v); i++ {
		d := uint64(v[i] - '0')
		if n > (max-d)/10 {
			return 0, fmt.Errorf("%.24s exceeds the limit %d", v, max)
		}
		n = n*10 + d
	}
	return n, nil
}

func allDigits(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}

// parseTimeout accepts a Go duration ("8s", "1m30s", "250ms") without a
// sign, or a canonical integer number of milliseconds.
func parseTimeout(v string) (time.Duration, error) {
	var d time.Duration
	if allDigits(v) {
		n, err := parseDecimal(v, uint64(MaxTimeout/time.Millisecond))
		if err != nil {
			return 0, fmt.Errorf("milliseconds: %w", err)
		}
		d = time.Duration(n) * time.Millisecond
	} else {
		var err error
		d, err = time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (e.g. 8s, 1m30s, 250ms, or integer milliseconds)", v)
		}
		if v[0] == '+' {
			return 0, fmt.Errorf("%q has a sign; write it without", v)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not positive", v)
	}
	if d > MaxTimeout {
		return 0, fmt.Errorf("%s exceeds the limit %s", d, time.Duration(MaxTimeout))
	}
	return d, nil
}

// checkTraceParent validates a W3C trace-context version-00 traceparent:
// 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lower case, ids not
// all zero.
func checkTraceParent(v string) error {
	if len(v) != 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return fmt.Errorf("%q is not version-traceid-parentid-flags (00-<32 hex>-<16 hex>-<2 hex>)", v)
	}
	if v[:2] != "00" {
		return fmt.Errorf("version %q is not supported (want 00)", v[:2])
	}
	for _, part := range [...]string{v[3:35], v[36:52], v[53:55]} {
		if !lowerHex(part) {
			return fmt.Errorf("%q has a character that is not lower-case hex", part)
		}
	}
	if allZero(v[3:35]) {
		return errors.New("trace id is all zeros")
	}
	if allZero(v[36:52]) {
		return errors.New("parent id is all zeros")
	}
	return nil
}

// checkTraceID accepts a 16-byte trace id in hex (either case) and returns it
// in lower case.
func checkTraceID(v string) (string, error) {
	if len(v) != 32 {
		return "", fmt.Errorf("%q is not a 16-byte trace id in hex (32 characters)", v)
	}
	lv := strings.ToLower(v)
	if !lowerHex(lv) {
		return "", fmt.Errorf("%q is not hex", v)
	}
	if allZero(lv) {
		return "", errors.New("trace id is all zeros")
	}
	return lv, nil
}

// checkTTL accepts what JetStream accepts for Nats-TTL, within MaxTTL: a
// duration of at least one second without a sign, a canonical integer number
// of seconds from 1, or "never" (any case). JetStream itself accepts TTLs
// whose nanoseconds overflow int64 and then expires the message at once.
func checkTTL(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	if strings.EqualFold(v, "never") {
		return nil
	}
	if allDigits(v) {
		n, err := parseDecimal(v, uint64(MaxTTL/time.Second))
		if err != nil {
			return fmt.Errorf("seconds: %w (%s)", err, time.Duration(MaxTTL))
		}
		if n < 1 {
			return fmt.Errorf("%q must be at least 1 second", v)
		}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration, a number of seconds, or never", v)
	}
	if v[0] == '+' {
		return fmt.Errorf("%q has a sign; write it without", v)
	}
	if d < time.Second {
		return fmt.Errorf("%q must be at least 1s", v)
	}
	if d > MaxTTL {
		return fmt.Errorf("%s exceeds the limit %s", d, time.Duration(MaxTTL))
	}
	return nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	return strings.Trim(s, "0") == ""
}

func spanID() string {
	var b [8]byte
	for {
		v := rand.Uint64()
		if v == 0 {
			continue
		}
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		return hex.EncodeToString(b[:])
	}
}
