// Package subjects holds the subject rules the broker's subsystems share:
// matching a literal subject against a pattern, whether two patterns
// overlap, and which patterns a stream may capture.
package subjects

import (
	"fmt"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// Match reports whether a valid literal subject matches a valid pattern.
// It allocates nothing.
func Match(pattern, subject string) bool {
	if pattern == subject {
		return true // a literal pattern, the common case: one compare
	}
	for {
		pi := strings.IndexByte(pattern, '.')
		si := strings.IndexByte(subject, '.')
		pt, st := pattern, subject
		if pi >= 0 {
			pt = pattern[:pi]
		}
		if si >= 0 {
			st = subject[:si]
		}
		if pt == ">" {
			return true // the subject has at least this token left
		}
		if pt != "*" && pt != st {
			return false
		}
		if pi < 0 || si < 0 {
			return pi < 0 && si < 0
		}
		pattern, subject = pattern[pi+1:], subject[si+1:]
	}
}

// Overlap reports whether some subject matches both patterns.
func Overlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) && i == len(bt):
			return true
		case i == len(at) || i == len(bt):
			return false
		case at[i] == ">" || bt[i] == ">":
			return true
		case at[i] == "*" || bt[i] == "*" || at[i] == bt[i]:
			continue
		default:
			return false
		}
	}
}

// CheckPublic validates a subject pattern a stream captures. Patterns
// that could capture reply inboxes or system subjects are refused: a
// stream on ">" would swallow every request's reply.
func CheckPublic(subj string) error {
	if err := semaq.CheckSubject(subj, true); err != nil {
		return err
	}
	first, _, _ := strings.Cut(subj, ".")
	switch {
	case first == "*" || first == ">":
		return fmt.Errorf("subject %q starts with a wildcard and would capture reply inboxes and system subjects; start it with a literal token", subj)
	case strings.HasPrefix(first, "$"):
		return fmt.Errorf("subject %q is in a reserved namespace ($...)", subj)
	case first == "_INBOX" || strings.HasPrefix(first, "_"):
		return fmt.Errorf("subject %q is in the reserved inbox namespace (_...)", subj)
	}
	return nil
}
