package broker

import "github.com/semaq/semaq/internal/broker/subjects"

// subjectMatches reports whether a valid literal subject matches a valid
// pattern (subjects.Match).
func subjectMatches(pattern, subject string) bool { return subjects.Match(pattern, subject) }
