package broker

import "github.com/semaq/semaq/internal/reserved"

// BrokerServiceSubjects are the subjects every user account imports from
// the node's account as services (tenancy.go).
func BrokerServiceSubjects() []string {
	var out []string
	for _, b := range reserved.BuiltinServices {
		out = append(out, b.Subject)
	}
	return out
}
