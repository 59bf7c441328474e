package identity

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/semaq"
)

func TestValidate(t *testing.T) {
	ok := []semaq.UserAddRequest{
		{Name: "admin", Role: "admin"},
		{Name: "ingest-svc", Tenant: "acme", Role: "publisher", Subjects: []string{"ai.inference.>"}},
		{Name: "alice", Tenant: "acme", Role: "reader", Subjects: []string{"results.acme.>", "a.*.b"}},
		{Name: "gpu-7", Role: "worker", Queues: []string{"INFER_*", "Q[0-9]", "EXACT"}},
		{Name: "svc", Role: "service", Subjects: []string{"svc.>"}},
		{Name: "metered", Tenant: "acme", Role: "service", Subjects: []string{"svc.>"}, RPM: 600, TPM: 100000},
	}
	for _, r := range ok {
		if err := Validate(r); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	bad := map[string]semaq.UserAddRequest{
		"name:":                 {Name: "a.b", Role: "admin"},
		"name: emp":             {Role: "admin"},
		"tenant:":               {Name: "a", Tenant: "ac me", Role: "admin"},
		"role:":                 {Name: "a", Role: "root"},
		"subjects: \">\"":       {Name: "a", Role: "publisher", Subjects: []string{">"}},
		"subjects: \"*.x\"":     {Name: "a", Role: "publisher", Subjects: []string{"*.x"}},
		"subjects: \"$SQ.>\"":   {Name: "a", Role: "reader", Subjects: []string{"$SQ.>"}},
		"subjects: \"_INBOX.>":  {Name: "a", Role: "reader", Subjects: []string{"_INBOX.>"}},
		"subjects: subject":     {Name: "a", Role: "reader", Subjects: []string{"a..b"}},
		"subjects: a publisher": {Name: "a", Role: "publisher"},
		"queues: a worker":      {Name: "a", Role: "worker"},
		"queues: \"A.B\"":       {Name: "a", Role: "worker", Queues: []string{"A.B"}},
		"queues: \"[\"":         {Name: "a", Role: "worker", Queues: []string{"["}},
		"subjects, queues":      {Name: "a", Role: "admin", Subjects: []string{"x"}},
		"queues: only":          {Name: "a", Role: "reader", Subjects: []string{"x"}, Queues: []string{"Q"}},
		"rpm: -1 is negative":   {Name: "a", Role: "admin", RPM: -1},
		"tpm: -2 is negative":   {Name: "a", Role: "admin", TPM: -2},
	}
	for want, r := range bad {
		err := Validate(r)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%+v: %v, want an error starting %q", r, err, want)
		}
	}
}

func TestQueueMatches(t *testing.T) {
	g := []string{"INFER_*"}
	if !QueueMatches(g, "INFER_A") || QueueMatches(g, "OTHER") || QueueMatches(g, "XINFER_A") {
		t.Fatal("glob")
	}
}
