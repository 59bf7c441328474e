package semaq

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
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
	fReceived
)

var canonical = [...]string{
	fModel: HdrModel, fModelVersion: HdrModelVersion, fAdapter: HdrAdapter,
	fPriority: HdrPriority, fTenant: HdrTenant, fIntent: HdrIntent,
	fTimeout: HdrTimeout, fDeadline: HdrDeadline, fSession: HdrSession,
	fPromptTokens: HdrPromptTokens, fSchemaID: HdrSchemaID,
	fTraceParent: HdrTraceParent, fTraceState: HdrTraceState, fTraceID: AliasTraceID,
	fMsgID: HdrMsgID, fTTL: HdrTTL, fReceived: HdrReceived,
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
}

// lookup classifies a header name without allocating for the common case of
// names that are not envelope headers.
func lookup(name string) field {
	// Every envelope name starts with a, n, t or x; anything else is a user
	// header and costs one comparison.
	if name == "" {
		return fNone
	}
	switch name[0] | 0x20 {
	case 'a', 'n', 't', 'x':
	default:
		return fNone
	}
	if len(name) > len("x-lora-adapter-id") {
		return fNone
	}
	var buf [24]byte
	b := buf[:len(name)]
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return names[string(b)] // the compiler does not allocate for this lookup
}

// IsEnvelopeHeader reports whether name (any case, aliases included) is one
// the ingress interprets.
func IsEnvelopeHeader(name string) bool { return lookup(name) != fNone }

// Parse validates the envelope headers of h without changing h.
func Parse(h map[string][]string, now time.Time) (Envelope, error) {
	return parse(h, now, NormalizeOptions{}, false)
}

// Normalize validates the envelope headers of h and rewrites h in place:
// aliases and other spellings become the canonical names, the priority is
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
		seen     [fReceived + 1]string // the spelling each field was given under
		renames  [fReceived + 1]struct{ from, to string }
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
		if f == fNone {
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
			var n int
			n, err = parseCount(v, 1<<31-1)
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

func parseCount(v string, max int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a non-negative integer", v)
	}
	if n > max {
		return 0, fmt.Errorf("%d exceeds the limit %d", n, max)
	}
	return n, nil
}

// parseTimeout accepts a Go duration ("8s", "1m30s", "250ms") or a bare
// integer number of milliseconds.
func parseTimeout(v string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > int64(MaxTimeout/time.Millisecond) {
			return 0, fmt.Errorf("%s ms exceeds the limit %s", v, time.Duration(MaxTimeout))
		}
		d = time.Duration(n) * time.Millisecond
	} else {
		d, err = time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (e.g. 8s, 1m30s, 250ms, or integer milliseconds)", v)
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

// checkTTL accepts what JetStream accepts for Nats-TTL: a duration of at
// least one second, an integer number of seconds, or "never".
func checkTTL(v string) error {
	if v == "never" {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 1 {
			return fmt.Errorf("%q must be at least 1 second", v)
		}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("%q is not a duration, a number of seconds, or never", v)
	}
	if d < time.Second {
		return fmt.Errorf("%q must be at least 1s", v)
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
