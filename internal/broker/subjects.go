package broker

import (
	"fmt"
	"strings"

	"github.com/semaq/semaq/semaq"
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

// checkSubject validates NATS subject syntax (semaq.CheckSubject).
func checkSubject(subj string, wildcards bool) error { return semaq.CheckSubject(subj, wildcards) }

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
