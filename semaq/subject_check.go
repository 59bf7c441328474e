package semaq

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxSubjectLen is the longest subject a client may publish to or give as a
// reply subject, in bytes. The broker adds its own prefixes (storage, ack
// routing) on top, so it stays well inside the server's control-line limit.
const MaxSubjectLen = 1024

// Subject prefixes no client may publish to or name as a reply subject:
// "$" is every system namespace ($JS, $KV, $O, $SYS, $SQ, ...), "_SQ_" the
// broker's own inboxes (group-commit acks, latency samples).
const (
	ReservedSystemPrefix = "$"
	ReservedBrokerPrefix = "_SQ_"
)

// ErrBadSubject is matched by every SubjectError.
var ErrBadSubject = errors.New("semaq: invalid subject")

// SubjectError reports a subject a client may not use. It matches
// ErrBadSubject with errors.Is.
type SubjectError struct {
	Kind    string // "publish subject" or "reply subject"
	Subject string // as given, cut to 64 bytes
	Reason  string
}

func (e *SubjectError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, e.Subject, e.Reason)
}

// Is reports whether target is ErrBadSubject.
func (e *SubjectError) Is(target error) bool { return target == ErrBadSubject }

// CheckPublishSubject reports whether a client may publish to subject: 1 to
// MaxSubjectLen bytes of valid UTF-8, non-empty dot-separated tokens, no
// wildcard character ('*' or '>') anywhere, no whitespace, control or
// invisible formatting characters (bidi controls, zero-width characters),
// and not under a reserved prefix ("$", "_SQ_"). It does not allocate when
// the subject is accepted.
func CheckPublishSubject(subject string) error {
	return checkLiteralSubject("publish subject", subject)
}

func checkLiteralSubject(kind, s string) error {
	if s == "" {
		return subjectErr(kind, s, "empty")
	}
	if len(s) > MaxSubjectLen {
		return subjectErr(kind, s, fmt.Sprintf("%d bytes; the limit is %d", len(s), MaxSubjectLen))
	}
	if s[0] == '$' || len(s) >= len(ReservedBrokerPrefix) && s[:len(ReservedBrokerPrefix)] == ReservedBrokerPrefix {
		return subjectErr(kind, s, "the $ and _SQ_ namespaces are reserved for the system")
	}
	tokenStart := true // at the first byte of a token
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '.':
				if tokenStart {
					return subjectErr(kind, s, fmt.Sprintf("empty token at byte %d", i))
				}
				tokenStart = true
				i++
				continue
			case c <= ' ' || c == 0x7f:
				return subjectErr(kind, s, fmt.Sprintf("whitespace or control character at byte %d", i))
			case c == '*' || c == '>':
				return subjectErr(kind, s, fmt.Sprintf("wildcard %q at byte %d; a literal subject is required", c, i))
			}
			tokenStart = false
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return subjectErr(kind, s, fmt.Sprintf("invalid UTF-8 at byte %d", i))
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return subjectErr(kind, s, fmt.Sprintf("whitespace or control character %U at byte %d", r, i))
		case unicode.Is(unicode.Cf, r):
			return subjectErr(kind, s, fmt.Sprintf("invisible formatting character %U (bidi control, zero-width) at byte %d", r, i))
		}
		tokenStart = false
		i += n
	}
	if tokenStart {
		return subjectErr(kind, s, "empty last token (trailing dot)")
	}
	return nil
}

func subjectErr(kind, s, reason string) error {
	if len(s) > 64 {
		s = s[:64] // may cut a rune; %q shows the bytes
	}
	return &SubjectError{Kind: kind, Subject: s, Reason: reason}
}
