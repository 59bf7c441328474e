package semaq_test

import (
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

func TestDeadLetterHeaderRoundTrip(t *testing.T) {
	orig := hdr(
		"AI-Model", "m",
		"X-Custom", "a",
		"X-Custom", "b",
		"Nats-Msg-Id", "order-1",
		"Nats-TTL", "1h",
		"nats-expected-stream", "AI",
		"AI-DLQ-Reason", "set by the publisher",
	)
	d := semaq.DeadLetter{
		Stream: "AI", Consumer: "worker", StreamSeq: 7, Subject: "ai.x", Reason: "terminated: bad",
		Deliveries: 3, Time: time.Date(2026, 11, 30, 12, 0, 0, 5, time.UTC), Stored: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC),
	}
	h := semaq.DeadLetterHeader(orig, &d)
	for k, want := range map[string]string{
		"AI-DLQ-Orig-Nats-Msg-Id":          "order-1",
		"AI-DLQ-Orig-Nats-TTL":             "1h",
		"AI-DLQ-Orig-nats-expected-stream": "AI",
		"AI-DLQ-Orig-AI-DLQ-Reason":        "set by the publisher",
		semaq.HdrDLQReason:                 "terminated: bad",
		semaq.HdrDLQSeq:                    "7",
		semaq.HdrDLQDeliveries:             "3",
		semaq.HdrDLQTime:                   "2026-11-30T12:00:00.000000005Z",
		"AI-Model":                         "m",
	} {
		if got := h[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"Nats-Msg-Id", "Nats-TTL", "nats-expected-stream", semaq.HdrDLQPayloadLost} {
		if _, ok := h[k]; ok {
			t.Errorf("stored header has %s", k)
		}
	}
	// JetStream's own headers on a stored or directly read dead letter.
	h["Nats-Msg-Id"] = []string{"AI:7:worker"}
	h["Nats-Sequence"] = []string{"12"}
	got, err := semaq.ParseDeadLetter(12, h, []byte("data"))
	if err != nil {
		t.Fatal(err)
	}
	d.Seq, d.Size, d.Headers, d.Data = 12, 4, orig, []byte("data")
	if !reflect.DeepEqual(got, &d) {
		t.Fatalf("parsed %+v\nwant   %+v", got, &d)
	}

	lost := semaq.DeadLetter{Stream: "WQ", Consumer: "w", StreamSeq: 1, Reason: "terminated", PayloadLost: "gone", Time: d.Time}
	h = semaq.DeadLetterHeader(nil, &lost)
	if h[semaq.HdrDLQReason][0] != "terminated (payload lost: gone)" || h[semaq.HdrDLQSubject] != nil {
		t.Errorf("lost-payload headers %v", h)
	}
	got, err = semaq.ParseDeadLetter(2, h, nil)
	lost.Seq = 2
	if err != nil || !reflect.DeepEqual(got, &lost) {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, &lost)
	}

	for _, bad := range []map[string][]string{
		nil,
		hdr(semaq.HdrDLQStream, "AI"),
		hdr(semaq.HdrDLQStream, "AI", semaq.HdrDLQReason, "x", semaq.HdrDLQSeq, "x"),
		hdr(semaq.HdrDLQStream, "AI", semaq.HdrDLQReason, "x", semaq.HdrDLQSeq, "1", semaq.HdrDLQTime, "yesterday"),
	} {
		if _, err := semaq.ParseDeadLetter(1, bad, nil); err == nil {
			t.Errorf("ParseDeadLetter(%v) accepted", bad)
		}
	}
}

// Any original headers survive a trip through the dead-letter queue.
func FuzzDeadLetterHeader(f *testing.F) {
	f.Add("Nats-Msg-Id", "x", "AI-DLQ-Orig-Nats-Msg-Id", "y", "terminated: r", "")
	f.Add("ai-dlq-reason", "x", "X", "", "max_deliveries", "gone")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, reason, lost string) {
		if reason == "" {
			reason = "r"
		}
		orig := map[string][]string{k1: {v1}, k2: {v2}}
		d := semaq.DeadLetter{Stream: "S", Consumer: "C", StreamSeq: 1, Subject: "s", Reason: reason, PayloadLost: lost, Time: time.Unix(1, 0).UTC()}
		got, err := semaq.ParseDeadLetter(1, semaq.DeadLetterHeader(orig, &d), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Reason != reason || got.PayloadLost != lost {
			t.Fatalf("reason %q lost %q, want %q %q", got.Reason, got.PayloadLost, reason, lost)
		}
		if len(got.Headers) == 0 {
			got.Headers = map[string][]string{}
		}
		if !maps.EqualFunc(got.Headers, orig, func(a, b []string) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("headers %q, want %q", got.Headers, orig)
		}
	})
}
