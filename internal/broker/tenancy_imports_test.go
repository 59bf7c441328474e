package broker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/tokens"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Every subject of the broker's surface that the node subscribes to — each
// $SQ.API handler, job answers, token writes — is inside exactly one
// service import of the user accounts, and every $SQ.API import has a
// handler behind it: a new API cannot be unreachable for store users, or
// reach the broker twice.
func TestEveryAPISubjectImportedOnce(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A queue, so its dispatcher's subscriptions are there too.
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	sz, err := s.NATSServer().Subsz(&server.SubszOptions{Subscriptions: true, Limit: 1 << 20, Account: server.DEFAULT_GLOBAL_ACCOUNT})
	if err != nil {
		t.Fatal(err)
	}
	surface := []string{"$SQ.API.", semaq.QueueAckPrefix, semaq.TokenWritePrefix}
	imports := broker.BrokerServiceSubjects()
	served := map[string]bool{}
	// The node maps token writes to its own relay (tokens/bind.go): the
	// relay's subject, seen from an import, is the write subject.
	relay := tokens.NodeWritePrefix(s.NATSServer().Name())
	for _, sub := range sz.Subs {
		if rest, ok := strings.CutPrefix(sub.Subject, relay); ok {
			sub.Subject = semaq.TokenWritePrefix + rest
		}
		if !slices.ContainsFunc(surface, func(p string) bool { return strings.HasPrefix(sub.Subject, p) }) {
			continue
		}
		var in, overlap []string
		for _, imp := range imports {
			if server.SubjectMatchesFilter(sub.Subject, imp) {
				in = append(in, imp)
				served[imp] = true
			} else if server.SubjectsCollide(sub.Subject, imp) {
				overlap = append(overlap, imp)
			}
		}
		if len(in) != 1 || len(overlap) > 0 {
			t.Errorf("handler subject %s: inside imports %v, overlapping %v; want inside exactly one (tenancy.go brokerServices)", sub.Subject, in, overlap)
		}
	}
	if len(served) == 0 {
		t.Fatal("no handler subjects found")
	}
	for _, imp := range imports {
		if strings.HasPrefix(imp, "$SQ.") && !served[imp] {
			t.Errorf("import %s has no handler behind it", imp)
		}
	}
}
