package broker

import (
	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/semaq"
)

// subjectMatches reports whether a valid literal subject matches a valid
// pattern (subjects.Match).
func subjectMatches(pattern, subject string) bool { return subjects.Match(pattern, subject) }

// checkSubject validates NATS subject syntax (semaq.CheckSubject).
func checkSubject(subj string, wildcards bool) error { return semaq.CheckSubject(subj, wildcards) }
