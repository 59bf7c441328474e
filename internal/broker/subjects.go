package broker

import (
	"fmt"
	"strings"
)

// checkPublicSubject validates a subject pattern a stream captures. Patterns
// that could capture reply inboxes or system subjects are refused: a stream
// on ">" would swallow every request's reply.
func checkPublicSubject(subj string) error {
	if err := checkSubject(subj, true); err != nil {
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

// checkSubject validates NATS subject syntax. With wildcards, '*' may stand
// for a whole token and '>' for the last one.
func checkSubject(subj string, wildcards bool) error {
	if subj == "" {
		return fmt.Errorf("subject is empty")
	}
	if len(subj) > 1024 {
		return fmt.Errorf("subject is longer than 1024 bytes")
	}
	tokens := strings.Split(subj, ".")
	for i, t := range tokens {
		if t == "" {
			return fmt.Errorf("subject %q has an empty token", subj)
		}
		for j := 0; j < len(t); j++ {
			if c := t[j]; c <= ' ' || c == 0x7f {
				return fmt.Errorf("subject %q has a space or control character", subj)
			}
		}
		if strings.ContainsAny(t, "*>") {
			if !wildcards {
				return fmt.Errorf("subject %q has a wildcard; publish to a literal subject", subj)
			}
			if len(t) != 1 {
				return fmt.Errorf("subject %q has a wildcard inside token %q", subj, t)
			}
			if t == ">" && i != len(tokens)-1 {
				return fmt.Errorf("subject %q has '>' before its last token", subj)
			}
		}
	}
	return nil
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b string) bool {
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
