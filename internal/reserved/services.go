package reserved

import (
	"fmt"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// Service is a subject family of the node's account that every user
// account imports (the tenants' with auth on, the public one without):
// the broker or JetStream answers there. Which users may call it is their
// role's permissions' business (auth/roles.go: admins may call every one).
type Service struct {
	Subject string
	// To is the subject of the node's account the import maps Subject to
	// ("" for Subject itself): the JetStream calls that name a subject
	// JetStream will publish to go to the broker's check first
	// (internal/broker/jsguard).
	To string
	// Streamed: the broker answers one request with several messages (a
	// pull's batch, a fetch's jobs), so the reply mapping lives until the
	// NATS server's response threshold (2 minutes), not until the first
	// answer.
	Streamed bool
}

// Target is the subject of the node's account the import reaches.
func (s Service) Target() string {
	if s.To != "" {
		return s.To
	}
	return s.Subject
}

// JetStreamGuardPrefix is where user accounts' consumer create and update
// calls arrive in the node's account: JetStreamGuardPrefix+"CONSUMER.CREATE.…"
// for $JS.API.CONSUMER.CREATE.…, and so on (internal/broker/jsguard).
const JetStreamGuardPrefix = "$SQ.JSG."

// BuiltinServices are the imports of the broker's own surface. None is a
// prefix of another.
var BuiltinServices = []Service{
	// JetStream: what the roles' permissions may reach (auth/roles.go).
	{Subject: "$JS.API.INFO"},
	{Subject: "$JS.API.STREAM.>"},
	{Subject: "$JS.API.CONSUMER.CREATE.>", To: JetStreamGuardPrefix + "CONSUMER.CREATE.>"},
	{Subject: "$JS.API.CONSUMER.DURABLE.>", To: JetStreamGuardPrefix + "CONSUMER.DURABLE.>"},
	{Subject: "$JS.API.CONSUMER.NAMES.>"},
	{Subject: "$JS.API.CONSUMER.LIST.>"},
	{Subject: "$JS.API.CONSUMER.INFO.>"},
	{Subject: "$JS.API.CONSUMER.DELETE.>"},
	{Subject: "$JS.API.CONSUMER.MSG.NEXT.>", Streamed: true},
	{Subject: "$JS.API.DIRECT.GET.>", Streamed: true},
	{Subject: "$JS.ACK.>"},
	{Subject: "$JS.FC.>"},
	// The management API, family by family: a queue fetch is answered
	// with several messages.
	{Subject: semaq.APIInfo},
	{Subject: "$SQ.API.STREAM.>"},
	{Subject: "$SQ.API.SCHEMA.>"},
	{Subject: "$SQ.API.DLQ.>"},
	{Subject: "$SQ.API.ROUTE.>"},
	{Subject: "$SQ.API.FILTER.>"},
	{Subject: "$SQ.API.KEYSHARED.>"},
	{Subject: "$SQ.API.AGENT.>"},
	{Subject: "$SQ.API.TOKENS.>"},
	{Subject: "$SQ.API.USER.>"},
	{Subject: "$SQ.API.AUDIT.>"},
	{Subject: "$SQ.API.CLUSTER.>"},
	{Subject: "$SQ.API.SESSION.>"},
	{Subject: "$SQ.API.PROVENANCE.>"},
	{Subject: "$SQ.API.POLICY.>"},
	{Subject: "$SQ.API.PLUGIN.>"},
	{Subject: "$SQ.API.MODEL.>"},
	{Subject: "$SQ.API.CLASS.>"},
	{Subject: "$SQ.API.PUB.>"},
	{Subject: "$SQ.API.QUEUE.CREATE.>"},
	{Subject: "$SQ.API.QUEUE.INFO.>"},
	{Subject: "$SQ.API.QUEUE.DELETE.>"},
	{Subject: semaq.APIQueueList},
	{Subject: "$SQ.API.QUEUE.CANCEL.>"},
	{Subject: "$SQ.API.QUEUE.FETCH.>", Streamed: true},
	// Job answers and token writes.
	{Subject: semaq.QueueAckPrefix + ">"},
	{Subject: semaq.TokenWritePrefix + ">"},
}

// checkService refuses a service a subsystem adds outside the management
// API's namespace, or one that overlaps one the table has.
func checkService(have []Service, s Service) error {
	if !strings.HasPrefix(s.Subject, semaq.APIPrefix) || s.To != "" {
		return fmt.Errorf("reserved: service %s: a subsystem's API lives under %s, mapped to itself", s.Subject, semaq.APIPrefix)
	}
	for _, h := range have {
		if subjectsOverlap(h.Subject, s.Subject) {
			return fmt.Errorf("reserved: service %s overlaps %s", s.Subject, h.Subject)
		}
	}
	return nil
}

// subjectsOverlap reports whether some subject matches both patterns.
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(at) && i < len(bt); i++ {
		if at[i] == ">" || bt[i] == ">" {
			return true
		}
		if at[i] != bt[i] && at[i] != "*" && bt[i] != "*" {
			return false
		}
	}
	return len(at) == len(bt)
}
