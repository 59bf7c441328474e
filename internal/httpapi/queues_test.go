package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

func TestHTTPQueueWorkerFlow(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if _, err := e.c.AddQueue(ctx, semaq.QueueConfig{Name: "INFER", Subjects: []string{"infer.>"}, MaxMessages: 2}); err != nil {
		t.Fatal(err)
	}
	pub := func(id string, prio string) response {
		h := http.Header{"Ai-Priority": {prio}, "Nats-Msg-Id": {id}, "Ai-Prompt-Tokens": {"40"}}
		return e.do(t, "POST", "/api/v1/publish/infer.llama", h, []byte(`{"prompt":"`+id+`"}`))
	}
	ra := pub("a", "bulk")
	if ra.status != 200 {
		t.Fatalf("publish a: %d %s", ra.status, ra.body)
	}
	var pa struct {
		CancelToken string `json:"cancel_token"`
	}
	if err := json.Unmarshal(ra.body, &pa); err != nil || pa.CancelToken == "" {
		t.Fatalf("publish a: no cancel token in %s", ra.body)
	}
	if r := pub("b", "critical"); r.status != 200 {
		t.Fatalf("publish b: %d %s", r.status, r.body)
	}
	// The queue holds its limit of 2: once the dispatcher has indexed
	// both, the next publish is refused with 429 and Retry-After.
	for deadline := time.Now().Add(10 * time.Second); ; {
		qi, err := e.c.QueueInfo(ctx, "INFER")
		if err == nil && qi.Status.Queued == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue never showed 2 requests: %+v %v", qi, err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	r := pub("c", "normal")
	if r.status != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), "overloaded") {
		t.Fatalf("publish to a full queue: %d %v %s", r.status, r.header, r.body)
	}

	r = e.do(t, "POST", "/api/v1/queues/INFER/fetch", jsonHdr(), []byte(`{"max":5,"max_tokens":50,"labels":{"model":"llama3"}}`))
	if r.status != 200 {
		t.Fatalf("fetch: %d %s", r.status, r.body)
	}
	var got struct {
		Jobs []struct {
			ID         string `json:"id"`
			Tokens     int64  `json:"tokens"`
			Data       string `json:"data"`
			AckSubject string `json:"ack_subject"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || len(got.Jobs) != 1 || got.Jobs[0].ID != "b" || got.Jobs[0].Data != `{"prompt":"b"}` {
		t.Fatalf("fetch with a 50-token budget got %s", r.body)
	}
	ack := got.Jobs[0].AckSubject
	r = e.do(t, "POST", "/api/v1/queues/INFER/answer", jsonHdr(), fmt.Appendf(nil, `{"ack_subject":%q,"action":"ack","output_tokens":12}`, ack))
	if r.status != 200 {
		t.Fatalf("answer: %d %s", r.status, r.body)
	}
	// Acks are idempotent (docs/queues.md): the same ack again answers ok;
	// any other answer to the job is refused, the job no longer held.
	r = e.do(t, "POST", "/api/v1/queues/INFER/answer", jsonHdr(), fmt.Appendf(nil, `{"ack_subject":%q,"action":"ack"}`, ack))
	if r.status != 200 {
		t.Fatalf("the same ack again: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/queues/INFER/answer", jsonHdr(), fmt.Appendf(nil, `{"ack_subject":%q,"action":"nak"}`, ack))
	if r.status != 409 || !strings.Contains(string(r.body), "no longer held") {
		t.Fatalf("a nak after the ack: %d %s", r.status, r.body)
	}
	// Only with the token of a's publish (docs/queues.md, Cancellation).
	if r = e.do(t, "POST", "/api/v1/queues/INFER/cancel/a", jsonHdr(), nil); r.status != 403 {
		t.Fatalf("cancel without the token: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/queues/INFER/cancel/a", jsonHdr(), fmt.Appendf(nil, `{"token":%q}`, pa.CancelToken))
	if r.status != 200 || !strings.Contains(string(r.body), `"removed"`) {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	r = e.do(t, "POST", "/api/v1/queues/INFER/fetch", jsonHdr(), []byte(`{"wait_ms":50}`))
	if r.status != 200 || !strings.Contains(string(r.body), `"jobs":[]`) {
		t.Fatalf("empty fetch: %d %s", r.status, r.body)
	}
	r = e.do(t, "GET", "/api/v1/queues/INFER", nil, nil)
	var qi semaq.QueueInfo
	if r.status != 200 || json.Unmarshal(r.body, &qi) != nil || qi.Status.Counters.Acked != 1 || qi.Status.Counters.OutputToks != 12 {
		t.Fatalf("queue info: %d %s", r.status, r.body)
	}
}

func TestHTTPQueueBadRequests(t *testing.T) {
	e := setup(t)
	if _, err := e.c.AddQueue(context.Background(), semaq.QueueConfig{Name: "INFER", Subjects: []string{"infer.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/api/v1/queues/INFER/fetch", `{"max":-1}`, 400, "max -1 is negative"},
		{"POST", "/api/v1/queues/INFER/fetch", `{"max":0}`, 400, "max 0 is outside 1..1024"},
		{"POST", "/api/v1/queues/INFER/fetch", `{"bogus":1}`, 400, `unknown key`},
		{"POST", "/api/v1/queues/INFER/fetch", `{"wait_ms":-5}`, 400, "wait_ms -5 is negative"},
		{"POST", "/api/v1/queues/NOPE/fetch", ``, 404, "queue NOPE not found"},
		{"GET", "/api/v1/queues/NOPE", ``, 404, "queue NOPE not found"},
		{"POST", "/api/v1/queues/INFER/answer", `{"ack_subject":"$SQ.QA.OTHER.1.x","action":"ack"}`, 400, "not a job of queue INFER"},
		{"POST", "/api/v1/queues/INFER/answer", `{"ack_subject":"$SQ.QA.INFER.1.x","action":"maybe"}`, 400, "not one of ack"},
		{"POST", "/api/v1/queues/INFER/answer", `{"ack_subject":"$SQ.QA.INFER.1.x","action":"ack"}`, 409, "no longer held"},
		{"POST", "/api/v1/queues/INFER/cancel/zzz", ``, 404, "holds no request"},
	} {
		r := e.do(t, tc.method, tc.path, jsonHdr(), []byte(tc.body))
		if r.status != tc.status || !strings.Contains(string(r.body), tc.want) {
			t.Errorf("%s %s %s = %d %s, want %d naming %q", tc.method, tc.path, tc.body, r.status, r.body, tc.status, tc.want)
		}
	}
}

// jsonHdr is the Content-Type every JSON endpoint asks for.
func jsonHdr() http.Header { return http.Header{"Content-Type": {"application/json"}} }
