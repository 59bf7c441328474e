package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/httpapi"
)

// FuzzPublishHandler feeds the publish endpoint arbitrary subjects, headers
// and bodies. Headers are encoded one per line as "Name: value". Whatever
// the input, the handler must answer JSON with a status from the documented
// set, a 200 must mean a message was stored (or recognised as a duplicate),
// and an error must mean nothing was.
func FuzzPublishHandler(f *testing.F) {
	const (
		maxPayload = 4 << 10
		maxHeader  = 1 << 10
	)
	srv := brokertest.Start(f, func(c *broker.Config) {
		c.MaxPayload = maxPayload
		c.MaxHeaderBytes = maxHeader
	})
	c := brokertest.Connect(f, srv)
	brokertest.AddStream(f, c, "FZ", "fz.>")
	h := httpapi.New(httpapi.Options{Client: c, MaxHeaderBytes: maxHeader, MaxBody: maxPayload})

	for _, s := range []struct {
		subject, headers string
		body             []byte
	}{
		{"fz.a", "", []byte("hello")},
		{"fz.a", "AI-Model: llama3\nAI-Priority: high\nAI-Tenant: acme", []byte(`{"prompt":"hi"}`)},
		{"fz.b", "X-Model-Version: 1\nX-Lora-Adapter-ID: a\nX-AI-Intent: chat\nX-AI-Timeout: 250\nX-Trace-ID: 4bf92f3577b34da6a3ce929d0e0e4736", nil},
		{"fz.c", "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntracestate: a=b", []byte("x")},
		{"fz.d", "Nats-Msg-Id: same", []byte("dup")},
		{"fz.d", "Nats-Msg-Id: same", []byte("dup")},
		{"fz.e", "Nats-Header-Request-Id: 7\nNats-Header-X: y", []byte("custom")},
		{"fz.f", "AI-Deadline: 2030-01-02T15:04:05Z\nAI-Prompt-Tokens: 12\nAI-Schema-Id: 3", nil},
		{"fz.g", "Nats-Expected-Last-Sequence: 99", nil},
		{"fz.h", "Nats-TTL: 1h", nil},
		{"fz.a", "AI-Priority: urgent", nil},
		{"fz.a", "AI-Timeout: soon", nil},
		{"fz.a", "AI-Model: " + strings.Repeat("m", 300), nil},
		{"fz.a", "Nats-Header-Big: " + strings.Repeat("b", 2000), nil},
		{"fz.a", "traceparent: 00-xyz", nil},
		{"fz.a", "AI-Model: a\nai-model: b", nil},
		{"fz.a", "AI-Model: a\rb", nil},
		{"fz.a", "Nats-Header-: x", nil},
		{"fz.a", "Nats-Header-Bad Name: x", nil},
		{"fz.a", "Nats-Header-Nats-Rollup: sub", nil},
		{"fz.a", "Nats-TTL: 0", nil},
		{"fz.a", "", bytes.Repeat([]byte("x"), maxPayload+1)},
		{"fz.a", "AI-Model: m", bytes.Repeat([]byte("x"), maxPayload)},
		{"fz.*", "", nil},
		{"fz.>", "", nil},
		{"fz..a", "", nil},
		{"fz.a b", "", nil},
		{"", "", nil},
		{".", "", nil},
		{"..", "", nil},
		{"fz/a", "", nil},
		{"fz.é", "", []byte{0xff, 0xfe}},
		{"$SQ.API.STREAM.DELETE.FZ", "", nil},
		{"_INBOX.x", "", nil},
		{"nowhere.x", "", nil},
	} {
		f.Add(s.subject, s.headers, s.body)
	}

	f.Fuzz(func(t *testing.T, subject, headers string, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		before, err := c.StreamInfo(ctx, "FZ")
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/api/v1/publish/"+url.PathEscape(subject), bytes.NewReader(body))
		if err != nil {
			t.Fatalf("building request: %v", err)
		}
		for line := range strings.SplitSeq(headers, "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				req.Header.Add(name, strings.TrimPrefix(value, " "))
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		status, answer := rec.Code, rec.Body.Bytes()
		switch status {
		case 200, 400, 404, 405, 413, 503:
		default:
			t.Fatalf("status %d: %s", status, answer)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("status %d with Content-Type %q", status, ct)
		}
		if !json.Valid(answer) {
			t.Fatalf("status %d with a body that is not JSON: %q", status, answer)
		}
		after, err := c.StreamInfo(ctx, "FZ")
		if err != nil {
			t.Fatal(err)
		}
		// Stored messages can expire (Nats-TTL), so "nothing stored" is the
		// last sequence standing still, and the count not growing.
		switch {
		case status == 200:
			var ack struct {
				Stream    *string
				Seq       *uint64
				Duplicate *bool
			}
			if err := json.Unmarshal(answer, &ack); err != nil || ack.Stream == nil || ack.Seq == nil || ack.Duplicate == nil {
				t.Fatalf("ack %s lacks stream, seq or duplicate (%v)", answer, err)
			}
			if *ack.Stream != "FZ" {
				t.Fatalf("ack names stream %q", *ack.Stream)
			}
			if *ack.Duplicate {
				if after.State.LastSeq != before.State.LastSeq || *ack.Seq > after.State.LastSeq {
					t.Fatalf("duplicate ack %s, but last seq went %d -> %d", answer, before.State.LastSeq, after.State.LastSeq)
				}
			} else if after.State.LastSeq != *ack.Seq || *ack.Seq <= before.State.LastSeq {
				t.Fatalf("ack %s, but last seq went %d -> %d", answer, before.State.LastSeq, after.State.LastSeq)
			}
		case status >= 400 && status < 500:
			if after.State.LastSeq != before.State.LastSeq || after.State.Messages > before.State.Messages {
				t.Fatalf("status %d (%s), but the stream went from %d messages (last %d) to %d (last %d)", status, answer,
					before.State.Messages, before.State.LastSeq, after.State.Messages, after.State.LastSeq)
			}
		}
	})
}
