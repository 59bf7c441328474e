package httpapi

import (
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// CustomHeaderPrefix marks an HTTP header to forward as a message header of
// its own: "Nats-Header-Request-Id: 7" becomes "Request-Id: 7".
const CustomHeaderPrefix = "Nats-Header-"

// expectedPrefix is JetStream's optimistic-concurrency headers
// (Nats-Expected-Last-Sequence and friends), forwarded as they are.
const expectedPrefix = "nats-expected-"

// envelopeSpelling maps the lower-case form of every documented envelope
// header to its spelling in docs/envelope.md. HTTP servers canonicalise
// header names ("Ai-Model", "Traceparent"); forwarding the documented
// spelling keeps the ingress from having to rename, and its errors name the
// header as the user knows it.
var envelopeSpelling = func() map[string]string {
	m := make(map[string]string)
	for _, n := range []string{
		semaq.HdrModel, semaq.HdrModelVersion, semaq.HdrAdapter, semaq.HdrPriority,
		semaq.HdrTenant, semaq.HdrIntent, semaq.HdrTimeout, semaq.HdrDeadline,
		semaq.HdrSession, semaq.HdrPromptTokens, semaq.HdrSchemaID,
		semaq.HdrTraceParent, semaq.HdrTraceState, semaq.HdrReceived,
		semaq.HdrMsgID, semaq.HdrTTL,
		semaq.AliasModelVersion, semaq.AliasAdapter, semaq.AliasIntent,
		semaq.AliasTimeout, semaq.AliasTraceID,
	} {
		m[strings.ToLower(n)] = n
	}
	return m
}()

// headerError is a request header the handler refuses before the ingress
// sees the message.
type headerError struct {
	header, reason string
}

func (e *headerError) Error() string { return fmt.Sprintf("invalid header %s: %s", e.header, e.reason) }

// forwardedName says under which name an HTTP header is forwarded to the
// ingress, or "" when it is not forwarded. An error means the header was
// meant to be forwarded but cannot be.
func forwardedName(k string) (string, error) {
	lk := strings.ToLower(k)
	switch {
	case strings.EqualFold(k, semaq.HdrCancelToken):
		return semaq.HdrCancelToken, nil // the ingress keeps its hash only
	case semaq.IsEnvelopeHeader(k):
		if n, ok := envelopeSpelling[lk]; ok {
			return n, nil
		}
		return k, nil // an envelope header newer than this table; the ingress renames it
	case strings.HasPrefix(lk, strings.ToLower(CustomHeaderPrefix)):
		n := k[len(CustomHeaderPrefix):]
		if n == "" {
			return "", &headerError{k, "no header name after the " + CustomHeaderPrefix + " prefix"}
		}
		if i := invalidTokenByte(n); i >= 0 {
			return "", &headerError{k, fmt.Sprintf("name has %q at byte %d; header names are letters, digits and !#$%%&'*+-.^_`|~", n[i], len(CustomHeaderPrefix)+i)}
		}
		if s, ok := envelopeSpelling[strings.ToLower(n)]; ok {
			return s, nil
		}
		if semaq.IsReservedHeader(n) {
			// Status and Description would read as a protocol status line,
			// Nats-* and KV-Operation as the broker's own markers.
			return "", &headerError{k, fmt.Sprintf("%s is a reserved header; a client may not set it", n)}
		}
		return n, nil
	case strings.HasPrefix(lk, expectedPrefix):
		if i := invalidTokenByte(k); i >= 0 {
			return "", &headerError{k, fmt.Sprintf("name has %q at byte %d", k[i], i)}
		}
		return k, nil
	}
	return "", nil
}

// envelopeFromHTTP copies the headers of an HTTP request that a publish
// forwards into a NATS header: the envelope headers (any case, aliases
// included), Nats-Expected-* as they are, and Nats-Header-<Name> as <Name>.
// Values are trimmed as the NATS client would trim them. It refuses names
// and values a NATS header cannot carry and a block over maxBytes, counted
// as the ingress counts it; everything else is the ingress's to judge.
func envelopeFromHTTP(in http.Header, out nats.Header, maxBytes int) error {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	slices.Sort(keys) // report the same header every time
	total, biggest, bigSize := 0, "", 0
	for _, k := range keys {
		name, err := forwardedName(k)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		size := 0
		for _, v := range in[k] {
			v = textproto.TrimString(v)
			if i := strings.IndexFunc(v, isCTL); i >= 0 {
				return &headerError{k, fmt.Sprintf("value has control character %q at byte %d", v[i], i)}
			}
			out[name] = append(out[name], v)
			size += len(name) + len(v) + 4 // "name: value\r\n"
		}
		total += size
		if size > bigSize {
			biggest, bigSize = k, size
		}
	}
	if total > maxBytes {
		return &headerError{biggest, fmt.Sprintf("headers total %d bytes; the limit is %d (this one is the largest, %d bytes)", total, maxBytes, bigSize)}
	}
	return nil
}

// isCTL reports the characters an HTTP field value may not hold (RFC 9110
// 5.5): controls other than horizontal tab. Go's HTTP server refuses them
// already; the check keeps handlers mounted elsewhere honest.
func isCTL(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }

// invalidTokenByte returns the index of the first byte of s that is not an
// RFC 9110 token character, or -1.
func invalidTokenByte(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return i
		}
	}
	return -1
}
