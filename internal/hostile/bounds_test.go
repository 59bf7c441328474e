package hostile

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// request sends body to subject as the attacker and decodes an error
// answer, if it is one.
func (a *attacker) request(t *testing.T, subject, body string) *semaq.APIError {
	t.Helper()
	resp, err := a.nc.Request(subject, []byte(body), 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var e semaq.ErrorReply
	_ = json.Unmarshal(resp.Data, &e)
	return e.Error
}

// TestSubscriptionFloodBounded: filtered subscriptions and key-shared
// members are consumers and goroutines on the broker; a client asking for
// more than the node allows is refused with 429, and one asking for an
// unbounded ack window is refused with 400.
func TestSubscriptionFloodBounded(t *testing.T) {
	srv := brokertest.Start(t, func(c *broker.Config) { c.MaxFilters, c.MaxKeySharedMembers = 3, 3 })
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "FLOOD", "flood.>")
	a := connectAttacker(t, srv)
	for i := range 4 {
		e := a.request(t, semaq.APIFilterStart, fmt.Sprintf(`{"subject":"flood.>","filter":"true","deliver_subject":"_INBOX.f%d"}`, i))
		if i < 3 && e != nil {
			t.Fatalf("filter %d: %v", i, e.Description)
		}
		if i == 3 && (e == nil || e.Code != 429 || !strings.Contains(e.Description, "the most it allows")) {
			t.Fatalf("filter over the bound: %+v, want a 429 naming the bound", e)
		}
	}
	for i := range 4 {
		e := a.request(t, semaq.APIKeySharedJoin, fmt.Sprintf(`{"subject":"flood.>","group":"g","member":"m%d","key":"session","deliver_subject":"_INBOX.k%d"}`, i, i))
		if i < 3 && e != nil {
			t.Fatalf("member %d: %v", i, e.Description)
		}
		if i == 3 && (e == nil || e.Code != 429) {
			t.Fatalf("member over the bound: %+v, want a 429", e)
		}
	}
	for _, r := range []struct{ subject, body string }{
		{semaq.APIFilterStart, `{"subject":"flood.>","filter":"true","deliver_subject":"_INBOX.big","max_ack_pending":100000000}`},
		{semaq.APIKeySharedJoin, `{"subject":"flood.>","group":"g2","key":"session","deliver_subject":"_INBOX.big","max_ack_pending":100000000}`},
	} {
		if e := a.request(t, r.subject, r.body); e == nil || e.Code != 400 || !strings.Contains(e.Description, "max_ack_pending") {
			t.Fatalf("%s with a huge window: %+v, want a 400 naming max_ack_pending", r.subject, e)
		}
	}
}
