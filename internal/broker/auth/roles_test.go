package auth

import (
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
)

// The role table as data: what each role may publish and subscribe to.
// internal/hostile/auth_test.go checks the same rights on a live server.
func TestRolePermissions(t *testing.T) {
	admin := &server.Permissions{}
	r := Rules{Deny: []string{"$SQ.w.>"}, Admin: admin, SubscribeDeny: []string{"$SQ.QA.>"}}
	for _, tc := range []struct {
		p        identity.Principal
		pub, sub []string // must be allowed
		notPub   []string // must not be in the allow list
	}{
		{p: identity.Principal{User: "ingest", Role: semaq.RolePublisher, Subjects: []string{"ai.>"}},
			pub: []string{"ai.>", semaq.APIInfo}, sub: []string{"_INBOX_ingest.>"}, notPub: []string{semaq.APIFilterStart}},
		{p: identity.Principal{User: "alice", Role: semaq.RoleReader, Subjects: []string{"r.>"}},
			pub: []string{"$JS.API.CONSUMER.CREATE.*.*.r.>", "$SQ.API.FILTER.>", "$SQ.API.KEYSHARED.>"}, sub: []string{"r.>", "_INBOX_alice.>"}, notPub: []string{"r.>"}},
		{p: identity.Principal{User: "gpu", Role: semaq.RoleWorker, Queues: []string{"INFER_*", "LATER"}},
			// The broker checks the globs on each fetch (internal/broker, TestWorkerQueueGlobsCheckedByTheBroker).
			pub: []string{"$SQ.API.QUEUE.FETCH.*", "$SQ.API.QUEUE.INFO.*", "$SQ.QA.>", "$SQ.TW.>"},
			sub: []string{"_INBOX_gpu.>", "$SQ.QC.*"}, notPub: []string{"$SQ.API.QUEUE.CREATE.*", "ai.>"}},
		{p: identity.Principal{User: "svc", Role: semaq.RoleService, Subjects: []string{"s.>"}},
			pub: []string{"s.>", "$SQ.API.FILTER.>"}, sub: []string{"s.>"}, notPub: []string{"$SQ.API.QUEUE.FETCH.*"}},
	} {
		perms, err := r.Permissions(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tc.pub {
			if !slices.Contains(perms.Publish.Allow, s) {
				t.Errorf("%s: publish %s not allowed: %v", tc.p.Role, s, perms.Publish.Allow)
			}
		}
		for _, s := range tc.notPub {
			if slices.Contains(perms.Publish.Allow, s) {
				t.Errorf("%s: publish %s allowed", tc.p.Role, s)
			}
		}
		for _, s := range tc.sub {
			if !slices.Contains(perms.Subscribe.Allow, s) {
				t.Errorf("%s: subscribe %s not allowed: %v", tc.p.Role, s, perms.Subscribe.Allow)
			}
		}
		if !slices.Equal(perms.Publish.Deny, r.Deny) || !slices.Equal(perms.Subscribe.Deny, r.SubscribeDeny) {
			t.Errorf("%s: deny lists do not start from the node's", tc.p.Role)
		}
		if slices.Contains(perms.Publish.Allow, semaq.APIUserAdd) || slices.Contains(perms.Subscribe.Allow, ">") {
			t.Errorf("%s: reaches the user API or everything", tc.p.Role)
		}
	}
	if p, _ := r.Permissions(identity.Principal{User: "root", Role: semaq.RoleAdmin}); p != admin {
		t.Error("admin does not get the admin permissions")
	}
	if _, err := r.Permissions(identity.Principal{User: "x", Role: "root"}); err == nil {
		t.Error("an unknown role gets permissions")
	}
}
