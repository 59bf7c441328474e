package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// apiReply is any $SQ.API reply: a result or an error object.
type apiReply struct {
	Error *semaq.APIError `json:"error"`
	ID    string          `json:"id"`
}

// fuzzAPI sends arbitrary request bodies to one API subject of a live
// broker. Every body gets a JSON reply: a result with an id (then stopT,
// formatted with it, ends what was started) or an error of the request
// (4xx) with a description, never a timeout or a server error.
func fuzzAPI(f *testing.F, subject, stopT string, seeds ...string) {
	s := brokertest.Start(f)
	c := brokertest.Connect(f, s)
	brokertest.AddStream(f, c, "F", "f.>")
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	nc := c.Conn()
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := nc.RequestWithContext(ctx, subject, body)
		if err != nil {
			t.Fatalf("request %q: %v", body, err)
		}
		var r apiReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("request %q: reply %q is not JSON: %v", body, m.Data, err)
		}
		if r.Error != nil {
			if r.Error.Code < 400 || r.Error.Code >= 500 || r.Error.Description == "" {
				t.Fatalf("request %q: error %+v is not a request error with a description", body, r.Error)
			}
			return
		}
		if r.ID == "" {
			t.Fatalf("request %q: reply %s has neither an id nor an error", body, m.Data)
		}
		if _, err := nc.RequestWithContext(ctx, fmt.Sprintf(stopT, r.ID), nil); err != nil {
			t.Fatalf("stopping %s: %v", r.ID, err)
		}
	})
}

func FuzzFilterStartRequest(f *testing.F) {
	fuzzAPI(f, semaq.APIFilterStart, semaq.APIFilterStopT,
		`{"subject":"f.x","filter":"true","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.>","filter":"payload.a > 1","deliver_subject":"_INBOX.fz","deliver":"new"}`,
		`{"subject":"f.x","filter":"payload.","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.x","filter":"true","deliver_subject":"$SQ.w.f.x"}`,
		`{"subject":"f.x","filter":"true","deliver_subject":"_INBOX.fz","max_ack_pending":-1}`,
		`{"subject":"f.x","filter":"true","deliver_subject":"_INBOX.fz","durable":"a.b"}`,
		`{"subject":"nowhere","filter":"true","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"","filter":"","deliver_subject":""}`,
		`{"subject":"f.x","filter":"true","deliver_subject":"_INBOX.fz","start_seq":18446744073709551615}`,
		`{"subject":"f.x","ack_wait":"1s"}`,
		`[]`, `null`, `{`, ``, "\xff",
	)
}

func FuzzKeySharedJoinRequest(f *testing.F) {
	fuzzAPI(f, semaq.APIKeySharedJoin, semaq.APIKeySharedLeaveT,
		`{"subject":"f.x","group":"g","key":"session","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.>","group":"g2","key":"payload.user","deliver_subject":"_INBOX.fz","member":"m1"}`,
		`{"subject":"f.x","group":"g","key":"tenant","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.x","group":"g3","key":"payload.","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.x","group":"g4","key":"1 + ","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.x","group":"a.b","key":"session","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.x","group":"g5","key":"session","deliver_subject":"$JS.API"}`,
		`{"subject":"f.x","group":"g6","key":"session","deliver_subject":"_INBOX.fz","ack_wait":5}`,
		`{"subject":"f.x","group":"g7","key":"session","deliver_subject":"_INBOX.fz","deliver":"later"}`,
		`{"subject":"nowhere","group":"g","key":"session","deliver_subject":"_INBOX.fz"}`,
		`{"subject":"f.x","group":"g","deliver_subject":"_INBOX.fz","member":"`+strings.Repeat("m", 300)+`"}`,
		`[]`, `null`, `{`, ``, "\xff",
	)
}
