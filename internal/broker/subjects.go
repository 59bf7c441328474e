package broker

import (
	"strings"

	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/semaq"
)

// checkPublicSubject validates a subject pattern a stream captures
// (subjects.CheckPublic).
func checkPublicSubject(subj string) error { return subjects.CheckPublic(subj) }

// subjectMatches reports whether a valid literal subject matches a valid
// pattern (subjects.Match).
func subjectMatches(pattern, subject string) bool { return subjects.Match(pattern, subject) }

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
