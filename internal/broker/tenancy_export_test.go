package broker

// BrokerServiceSubjects are the subjects every user account imports from
// the node's account as services (tenancy.go).
func BrokerServiceSubjects() []string {
	out := make([]string, 0, len(brokerServices))
	for _, b := range brokerServices {
		out = append(out, b.subject)
	}
	return out
}
