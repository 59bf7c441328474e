package reserved_test

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// literal is a subject pattern matches.
func literal(pattern string) string {
	return strings.NewReplacer("*", "x", ">", "x").Replace(pattern)
}

// No subject of the table may ever be a reply or deliver target a client
// names: semaq.CheckReplySubject, which every door runs, refuses each.
func TestReservedSubjectsNeverReplies(t *testing.T) {
	tab, err := reserved.NewTable(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	subjects := append(tab.Writes(), reserved.InboxSubjects()...)
	subjects = append(subjects, reserved.StoragePrefix+">", reserved.AuditPrefix+">", reserved.TokenStorePrefix+">", reserved.JetStreamGuardPrefix+">")
	for _, s := range tab.Services() {
		subjects = append(subjects, s.Subject, s.Target())
	}
	for _, r := range tab.Resources() {
		if r.Bucket != "" {
			subjects = append(subjects, "$KV."+r.Bucket+".>")
		}
	}
	for _, s := range subjects {
		if semaq.CheckReplySubject(literal(s)) == nil {
			t.Errorf("%s is accepted as a reply subject", s)
		}
	}
}

func TestTableRows(t *testing.T) {
	tab, err := reserved.NewTable([]reserved.Resource{{Stream: "SQ_TOY", Owner: "toy", Access: reserved.ClientConsumers}}, []reserved.Service{{Subject: "$SQ.API.TOY.>"}})
	if err != nil {
		t.Fatal(err)
	}
	has := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		what string
		list []string
		s    string
		want bool
	}{
		{"replicated", tab.Replicated(), "KV_SQ_USERS", true},
		{"replicated", tab.Replicated(), "SQ_TOY", false},
		{"hidden", tab.Hidden(), "KV_SQ_USERS", true},
		{"hidden", tab.Hidden(), reserved.AuditStream, true},
		{"hidden", tab.Hidden(), semaq.DLQStream, false},
		{"closed consumers", tab.ClosedConsumers(), semaq.TokenStream, false},
		{"closed consumers", tab.ClosedConsumers(), "SQ_TOY", false},
		{"closed consumers", tab.ClosedConsumers(), "KV_SQ_SCHEMAS", true},
		{"streams", tab.Streams(), "SQ_TOY", true},
		{"writes", tab.Writes(), semaq.DLQPrefix + ">", true},
	} {
		if has(c.list, c.s) != c.want {
			t.Errorf("%s has %s: %v, want %v", c.what, c.s, !c.want, c.want)
		}
	}
	if svcs := tab.Services(); svcs[len(svcs)-1].Subject != "$SQ.API.TOY.>" {
		t.Errorf("the added service is not in the table: %v", svcs[len(svcs)-1])
	}
}

func TestTableRefuses(t *testing.T) {
	for name, c := range map[string]struct {
		rs   []reserved.Resource
		svcs []reserved.Service
	}{
		"a stream twice":            {rs: []reserved.Resource{{Stream: semaq.TokenStream, Owner: "x"}}},
		"a bad stream name":         {rs: []reserved.Resource{{Stream: "SQ.X", Owner: "x"}}},
		"a misnamed bucket stream":  {rs: []reserved.Resource{{Stream: "SQ_X", Bucket: "SQ_X", Owner: "x"}}},
		"a write a client may use":  {rs: []reserved.Resource{{Stream: "SQ_X", Owner: "x", Writes: []string{"orders.>"}}}},
		"a service outside the API": {svcs: []reserved.Service{{Subject: "orders.>"}}},
		"a service over another":    {svcs: []reserved.Service{{Subject: "$SQ.API.STREAM.INFO.X"}}},
		"a service mapped away":     {svcs: []reserved.Service{{Subject: "$SQ.API.TOY.>", To: "$SQ.API.STREAM.>"}}},
	} {
		if _, err := reserved.NewTable(c.rs, c.svcs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
