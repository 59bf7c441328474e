package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// batchAnswer is the answer to POST /api/v1/publish.
type batchAnswer struct {
	Stored  int  `json:"stored"`
	Refused int  `json:"refused"`
	Atomic  bool `json:"atomic"`
	Error   *struct {
		Code    int    `json:"code"`
		ErrCode uint16 `json:"err_code"`
		Message string `json:"message"`
	} `json:"error"`
	Index   *int `json:"index"`
	Results []struct {
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate *bool  `json:"duplicate"`
		MsgID     string `json:"msg_id"`
		Error     *struct {
			Code    int    `json:"code"`
			ErrCode uint16 `json:"err_code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"results"`
}

func (e *env) batch(t *testing.T, query, ctype, body string) (response, batchAnswer) {
	t.Helper()
	hdr := http.Header{}
	if ctype != "" {
		hdr.Set("Content-Type", ctype)
	}
	r := e.do(t, http.MethodPost, "/api/v1/publish"+query, hdr, []byte(body))
	var a batchAnswer
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatalf("batch answer is not JSON: %v: %s", err, r.body)
	}
	return r, a
}

// read reads the first n messages stored on subject (which may have
// wildcards).
func (e *env) read(t *testing.T, subject string, n int) []*client.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := e.c.Subscribe(ctx, subject, client.WithMaxMessages(n))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var msgs []*client.Msg
	for range n {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("reading %s: %d of %d messages: %v", subject, len(msgs), n, err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// A fast batch, as NDJSON and as a JSON array: the valid messages are
// stored, in order, with their data and headers, and every other one has
// its own error; nothing refuses the batch as a whole.
func TestPublishBatchHTTPFast(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ctype, body string }{
		{"ndjson", "application/x-ndjson", strings.Join([]string{
			`{"subject":"ai.b.1","data":{"prompt": "hi"},"headers":{"AI-Model":"m1","X-Tag":["a","b"]}}`,
			``,
			`{"subject":"ai.*","data":1}`,
			`{"subject":"ai.b.2","data_base64":"AAH/","headers":{"Nats-Msg-Id":"mine-1"}}`,
			`{"subject":"nowhere.x","data":2}`,
			`{"subject":"ai.b.3","headers":{"Nats-Batch-Id":"x"}}`,
			`{"subject":"ai.b.4"}`,
		}, "\n") + "\n"},
		{"array", "application/json; charset=utf-8", `[
			{"subject":"ai.b.1","data":{"prompt": "hi"},"headers":{"AI-Model":"m1","X-Tag":["a","b"]}},
			{"subject":"ai.*","data":1},
			{"subject":"ai.b.2","data_base64":"AAH/","headers":{"Nats-Msg-Id":"mine-1"}},
			{"subject":"nowhere.x","data":2},
			{"subject":"ai.b.3","headers":{"Nats-Batch-Id":"x"}},
			{"subject":"ai.b.4"}
		]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			r, a := e.batch(t, "", tc.ctype, tc.body)
			if r.status != http.StatusOK || a.Stored != 3 || a.Refused != 3 || a.Atomic || a.Error != nil || len(a.Results) != 6 {
				t.Fatalf("%d %s, want 200 with 3 stored and 3 refused", r.status, r.body)
			}
			for i, want := range []struct {
				seq     uint64
				code    int
				errCode uint16
				msg     string
			}{
				{seq: 1}, {code: 400, errCode: semaq.ErrCodeBadRequest, msg: "wildcard"}, {seq: 2},
				{code: 404, errCode: semaq.ErrCodeNoStream, msg: "no stream captures subject nowhere.x"},
				{code: 400, errCode: semaq.ErrCodeBadEnvelope, msg: "Nats-Batch-Id"}, {seq: 3},
			} {
				res := a.Results[i]
				if !strings.HasPrefix(res.MsgID, "http-") && res.MsgID != "mine-1" {
					t.Errorf("result %d: msg_id %q, want the door's http-... or the message's own", i, res.MsgID)
				}
				if want.seq != 0 {
					if res.Error != nil || res.Stream != "AI" || res.Seq != want.seq || res.Duplicate == nil || *res.Duplicate {
						t.Errorf("result %d: %s, want stored at AI/%d", i, r.body, want.seq)
					}
					continue
				}
				if res.Error == nil || res.Error.Code != want.code || res.Error.ErrCode != want.errCode || !strings.Contains(res.Error.Message, want.msg) || res.Seq != 0 {
					t.Errorf("result %d: %+v, want %d/%d naming %q", i, res.Error, want.code, want.errCode, want.msg)
				}
			}
			if a.Results[2].MsgID != "mine-1" {
				t.Errorf("the message's own Nats-Msg-Id became %q", a.Results[2].MsgID)
			}
			msgs := e.read(t, "ai.b.>", 3)
			if string(msgs[0].Data) != `{"prompt":"hi"}` || msgs[0].Header.Get(semaq.HdrModel) != "m1" ||
				strings.Join(msgs[0].Header.Values("X-Tag"), ",") != "a,b" || msgs[0].Header.Get(semaq.HdrMsgID) != a.Results[0].MsgID {
				t.Errorf("message 0 stored as %q %v", msgs[0].Data, msgs[0].Header)
			}
			if string(msgs[1].Data) != "\x00\x01\xff" || msgs[2].Subject != "ai.b.4" || len(msgs[2].Data) != 0 {
				t.Errorf("messages 2 and 5 stored as %q and %s %q", msgs[1].Data, msgs[2].Subject, msgs[2].Data)
			}

			// Sent again, the batch is deduplicated by the ids it was given.
			again := strings.NewReplacer(`"data":{"prompt": "hi"},"headers":{`, `"data":{"prompt": "hi"},"headers":{"Nats-Msg-Id":"`+a.Results[0].MsgID+`",`).Replace(tc.body)
			_, b := e.batch(t, "", tc.ctype, again)
			if b.Stored != 3 || b.Results[0].Duplicate == nil || !*b.Results[0].Duplicate || b.Results[0].Seq != 1 || !*b.Results[2].Duplicate {
				t.Errorf("sent again with its ids: %+v, want messages 0 and 2 duplicates", b)
			}
		})
	}
}

// An atomic batch stores all or nothing: one message refused, by the door
// or by the ingress, refuses it, naming the message, with that message's
// status.
func TestPublishBatchHTTPAtomic(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r, a := e.batch(t, "?atomic=true", "application/x-ndjson",
		`{"subject":"ai.a.1","data":1}`+"\n"+`{"subject":"ai.a.2","data":2,"headers":{"Nats-Msg-Id":"d"}}`+"\n"+`{"subject":"ai.a.3","data":3,"headers":{"Nats-Msg-Id":"d"}}`)
	if r.status != http.StatusOK || !a.Atomic || a.Stored != 3 || a.Refused != 0 {
		t.Fatalf("%d %s, want 200 with 3 stored", r.status, r.body)
	}
	if a.Results[0].Seq != 1 || a.Results[1].Seq != 2 || a.Results[2].Seq != 2 || !*a.Results[2].Duplicate {
		t.Fatalf("results %s: want seqs 1 and 2, and message 2 a duplicate of message 1 (the same Nats-Msg-Id)", r.body)
	}

	for _, tc := range []struct {
		name, body string
		status     int
		index      int
		msg        string
	}{
		{"refused by the door", `{"subject":"ai.a.4"}` + "\n" + `{"subject":"ai.a.>"}`, 400, 1, "message 1 on ai.a.> refused"},
		{"refused by the ingress", `{"subject":"ai.a.4"}` + "\n" + `{"subject":"ai.a.5"}` + "\n" + `{"subject":"nowhere.x"}`, 404, 2, "message 2 on nowhere.x refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, a := e.batch(t, "?atomic=1", "application/x-ndjson", tc.body)
			if r.status != tc.status || a.Error == nil || a.Error.Code != tc.status || a.Error.ErrCode != semaq.ErrCodeBatchRefused ||
				!strings.Contains(a.Error.Message, tc.msg) || a.Index == nil || *a.Index != tc.index || a.Stored != 0 {
				t.Fatalf("%d %s, want %d refusing the batch at message %d", r.status, r.body, tc.status, tc.index)
			}
			for i, res := range a.Results {
				if res.Error == nil || res.Seq != 0 || res.MsgID == "" {
					t.Errorf("result %d of a refused atomic batch: %+v", i, res)
				}
			}
		})
	}
	if n := e.streamState(t, "AI").Messages; n != 2 {
		t.Fatalf("stream AI has %d messages after the refused batches, want the first batch's 2", n)
	}
}

// A body that does not parse, or is over a bound, stores nothing and says
// why, naming the line.
func TestPublishBatchHTTPRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	over := strings.Repeat(`{"subject":"ai.x"}`+"\n", semaq.MaxBatchMsgs+1)
	for _, tc := range []struct {
		name, query, ctype, body string
		status                   int
		errCode                  uint16
		msg                      string
	}{
		{"bad line", "", "application/x-ndjson", `{"subject":"ai.x"}` + "\n\n" + `{"subject":"ai.y","data":}` + "\n", 400, semaq.ErrCodeBadBatch, "line 3 (message 1): \"data\": not valid JSON"},
		{"unknown key", "", "application/x-ndjson", `{"subject":"ai.x","payload":1}`, 400, semaq.ErrCodeBadBatch, `line 1 (message 0): unknown key "payload"`},
		{"bad item", "", "application/json", `[{"subject":"ai.x"},{"subject":"ai.y","data":1,"data_base64":"AA=="}]`, 400, semaq.ErrCodeBadBatch, "message 1: both"},
		{"not an array", "", "application/json", `{"subject":"ai.x"}`, 400, semaq.ErrCodeBadBatch, "want a JSON array"},
		{"empty", "", "application/x-ndjson", "\n\n", 400, semaq.ErrCodeBadBatch, "no messages"},
		{"over the body bound", "", "application/json",
			`[{"subject":"ai.x","data":"` + strings.Repeat("x", 5000) + `"},{"subject":"ai.x","data":"` + strings.Repeat("x", 5000) + `"}]`,
			413, semaq.ErrCodeTooLarge, "larger than the limit of 8192 bytes"},
		{"text/plain", "", "text/plain", `{"subject":"ai.x"}`, 415, semaq.ErrCodeBadRequest, "application/x-ndjson"},
		{"bad atomic", "?atomic=yes", "application/x-ndjson", `{"subject":"ai.x"}`, 400, semaq.ErrCodeBadRequest, "atomic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			hdr.Set("Content-Type", tc.ctype)
			got := wantError(t, e.do(t, http.MethodPost, "/api/v1/publish"+tc.query, hdr, []byte(tc.body)), tc.status, tc.msg)
			if got.Error.ErrCode != tc.errCode {
				t.Errorf("err_code %d, want %d", got.Error.ErrCode, tc.errCode)
			}
		})
	}
	if n := e.streamState(t, "AI").Messages; n != 0 {
		t.Fatalf("stream AI has %d messages, want none", n)
	}

	// The body bound is the broker's max payload: one that takes a body of
	// more messages than a batch may have.
	big := brokertest.Start(t, func(c *broker.Config) { c.MaxPayload = 64 << 10 })
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/x-ndjson")
	bigEnv := &env{base: "http://" + big.HTTPAddr(), hc: e.hc}
	got := wantError(t, bigEnv.do(t, http.MethodPost, "/api/v1/publish", hdr, []byte(over)), 413, "more than 1000 messages")
	if got.Error.ErrCode != semaq.ErrCodeBatchLimit {
		t.Errorf("err_code %d, want %d", got.Error.ErrCode, semaq.ErrCodeBatchLimit)
	}
}

// With auth on a batch acts with the key's rights, message by message: a
// key of one tenant cannot slip a message onto another tenant's subjects
// among its own.
func TestPublishBatchHTTPAuth(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	acme := e.keys[semaq.RolePublisher] // tenant acme, orders.acme.>
	globex := e.addUser(t, semaq.UserAddRequest{Name: "globex-ingest", Tenant: "globex", Role: semaq.RolePublisher, Subjects: []string{"orders.globex.>"}})
	body := `{"subject":"orders.acme.1","data":1}` + "\n" + `{"subject":"orders.globex.1","data":2}` + "\n"
	decode := func(a authAnswer) batchAnswer {
		t.Helper()
		var b batchAnswer
		if err := json.Unmarshal([]byte(a.body), &b); err != nil {
			t.Fatalf("%d %s: %v", a.status, a.body, err)
		}
		return b
	}

	a := e.call(t, "POST", "/api/v1/publish", acme, "application/x-ndjson", body)
	b := decode(a)
	if a.status != 200 || b.Stored != 1 || b.Results[0].Seq == 0 || b.Results[1].Error == nil || b.Results[1].Error.Code != 403 ||
		!strings.Contains(b.Results[1].Error.Message, "may not publish on orders.globex.1") {
		t.Fatalf("acme's batch with a globex message: %d %s, want its own stored and globex's refused 403", a.status, a.body)
	}
	a = e.call(t, "POST", "/api/v1/publish?atomic=true", acme, "application/x-ndjson", body)
	b = decode(a)
	if a.status != 403 || b.Stored != 0 || b.Index == nil || *b.Index != 1 || b.Error == nil || b.Error.ErrCode != semaq.ErrCodeBatchRefused {
		t.Fatalf("acme's atomic batch with a globex message: %d %s, want 403 refusing it at message 1", a.status, a.body)
	}
	a = e.call(t, "POST", "/api/v1/publish", e.keys[semaq.RoleReader], "application/x-ndjson", body)
	if b = decode(a); a.status != 200 || b.Stored != 0 || b.Refused != 2 || b.Results[0].Error.Code != 403 {
		t.Fatalf("a reader's batch: %d %s, want every message refused 403", a.status, a.body)
	}
	a = e.call(t, "POST", "/api/v1/publish", globex, "application/json", `[{"subject":"orders.globex.1","data":3}]`)
	if b = decode(a); a.status != 200 || b.Stored != 1 {
		t.Fatalf("globex's own batch: %d %s, want stored", a.status, a.body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := e.admin.StreamInfo(ctx, "ORD")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 2 {
		t.Fatalf("stream ORD has %d messages, want acme's one and globex's one", info.State.Messages)
	}
}
