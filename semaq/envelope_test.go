package semaq_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func hdr(kv ...string) map[string][]string {
	h := map[string][]string{}
	for i := 0; i < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

func TestNormalizeCanonicalises(t *testing.T) {
	h := hdr(
		"ai-model", "llama3-70b",
		"X-Model-Version", "v2.0.3",
		"X-Lora-Adapter-ID", "finetune-customer-a-7b",
		"AI-PRIORITY", "High",
		"AI-Tenant", "acme",
		"X-AI-Intent", "reasoning",
		"X-AI-Timeout", "8s",
		"AI-Session", "s-1",
		"AI-Prompt-Tokens", "512",
		"X-Trace-ID", "4BF92F3577B34DA6A3CE929D0E0E4736",
		"nats-msg-id", "m-1",
		"Nats-TTL", "1h",
		"Custom", "kept",
	)
	env, err := semaq.Normalize(h, now, semaq.NormalizeOptions{Stamp: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"AI-Model":         "llama3-70b",
		"AI-Model-Version": "v2.0.3",
		"AI-Adapter":       "finetune-customer-a-7b",
		"AI-Priority":      "2",
		"AI-Tenant":        "acme",
		"AI-Intent":        "reasoning",
		"AI-Timeout":       "8s",
		"AI-Deadline":      "2026-11-30T12:00:08Z",
		"AI-Session":       "s-1",
		"AI-Prompt-Tokens": "512",
		"Nats-Msg-Id":      "m-1",
		"Nats-TTL":         "1h",
		"AI-Received":      "2026-11-30T12:00:00Z",
		"Custom":           "kept",
	}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	tp := h["traceparent"]
	if len(tp) != 1 || !strings.HasPrefix(tp[0], "00-4bf92f3577b34da6a3ce929d0e0e4736-") || !strings.HasSuffix(tp[0], "-01") {
		t.Errorf("traceparent = %q, want one made from X-Trace-ID", tp)
	}
	for _, gone := range []string{"ai-model", "X-Model-Version", "X-Lora-Adapter-ID", "AI-PRIORITY", "X-AI-Intent", "X-AI-Timeout", "X-Trace-ID", "nats-msg-id"} {
		if _, ok := h[gone]; ok {
			t.Errorf("non-canonical header %s still present", gone)
		}
	}
	if len(h) != len(want)+1 {
		t.Errorf("got %d headers, want %d: %v", len(h), len(want)+1, h)
	}
	if env.Priority != semaq.PriorityHigh || env.PromptTokens != 512 || env.Timeout != 8*time.Second || env.Model != "llama3-70b" {
		t.Errorf("envelope = %+v", env)
	}
	if _, err := semaq.Parse(h, now); err != nil {
		t.Errorf("normalised headers do not parse again: %v", err)
	}
}

func TestNormalizeDefaults(t *testing.T) {
	h := hdr("Other", "x")
	env, err := semaq.Normalize(h, now, semaq.NormalizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if env.Priority != semaq.PriorityNormal || env.PromptTokens != -1 || !env.Deadline.IsZero() {
		t.Errorf("defaults = %+v", env)
	}
	if len(h) != 1 {
		t.Errorf("headers changed without stamping: %v", h)
	}
}

func TestDeadlineIsEarlierOfTimeoutAndDeadline(t *testing.T) {
	for _, tc := range []struct {
		timeout, deadline, want string
	}{
		{"10s", "2026-11-30T12:00:05Z", "2026-11-30T12:00:05Z"},
		{"3s", "2026-11-30T12:00:05Z", "2026-11-30T12:00:03Z"},
		{"1500", "", "2026-11-30T12:00:01.5Z"},
		{"", "2026-11-30T13:00:00+01:00", "2026-11-30T13:00:00+01:00"},
	} {
		h := hdr()
		if tc.timeout != "" {
			h["AI-Timeout"] = []string{tc.timeout}
		}
		if tc.deadline != "" {
			h["AI-Deadline"] = []string{tc.deadline}
		}
		env, err := semaq.Normalize(h, now, semaq.NormalizeOptions{})
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		want, _ := time.Parse(time.RFC3339Nano, tc.want)
		if !env.Deadline.Equal(want) {
			t.Errorf("%+v: deadline %s, want %s", tc, env.Deadline, want)
		}
		if got, _ := time.Parse(time.RFC3339Nano, h["AI-Deadline"][0]); !got.Equal(want) {
			t.Errorf("%+v: AI-Deadline header %s, want %s", tc, h["AI-Deadline"][0], want)
		}
	}
}

func TestNormalizeRejects(t *testing.T) {
	long := strings.Repeat("m", semaq.MaxEnvelopeValue+1)
	for _, tc := range []struct {
		name   string
		h      map[string][]string
		header string // the header the error must name
		reason string // a fragment of the reason
	}{
		{"unknown priority", hdr("AI-Priority", "urgent"), "AI-Priority", "unknown priority"},
		{"priority out of range", hdr("AI-Priority", "10"), "AI-Priority", "unknown priority"},
		{"timeout unparsable", hdr("AI-Timeout", "soon"), "AI-Timeout", "not a duration"},
		{"timeout alias unparsable", hdr("X-AI-Timeout", "8 seconds"), "X-AI-Timeout", "not a duration"},
		{"timeout zero", hdr("AI-Timeout", "0s"), "AI-Timeout", "not positive"},
		{"timeout negative", hdr("AI-Timeout", "-5s"), "AI-Timeout", "not positive"},
		{"timeout too long", hdr("AI-Timeout", "9000h"), "AI-Timeout", "exceeds"},
		{"deadline not a time", hdr("AI-Deadline", "tomorrow"), "AI-Deadline", "RFC 3339"},
		{"oversize model", hdr("AI-Model", long), "AI-Model", "limit is 256"},
		{"model with space", hdr("AI-Model", "llama 3"), "AI-Model", "visible ASCII"},
		{"empty tenant", hdr("AI-Tenant", ""), "AI-Tenant", "empty"},
		{"prompt tokens not a number", hdr("AI-Prompt-Tokens", "abc"), "AI-Prompt-Tokens", "non-negative integer"},
		{"prompt tokens negative", hdr("AI-Prompt-Tokens", "-1"), "AI-Prompt-Tokens", "non-negative integer"},
		{"prompt tokens huge", hdr("AI-Prompt-Tokens", "999999999999"), "AI-Prompt-Tokens", "exceeds"},
		{"schema id", hdr("AI-Schema-Id", "x"), "AI-Schema-Id", "integer"},
		{"traceparent short", hdr("traceparent", "00-abc-def-01"), "traceparent", "version-traceid"},
		{"traceparent upper", hdr("traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "traceparent", "lower-case hex"},
		{"traceparent zero", hdr("traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "traceparent", "all zeros"},
		{"traceparent version", hdr("traceparent", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "traceparent", "not supported"},
		{"trace id short", hdr("X-Trace-ID", "abc123"), "X-Trace-ID", "16-byte"},
		{"trace id not hex", hdr("X-Trace-ID", strings.Repeat("g", 32)), "X-Trace-ID", "not hex"},
		{"trace id conflicts", hdr("X-Trace-ID", "11111111111111111111111111111111", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "X-Trace-ID", "differs"},
		{"ttl unparsable", hdr("Nats-TTL", "forever"), "Nats-TTL", "never"},
		{"ttl too short", hdr("Nats-TTL", "500ms"), "Nats-TTL", "at least 1s"},
		{"alias and canonical", hdr("AI-Intent", "a", "X-AI-Intent", "b"), "I", "given twice"},
		{"repeated value", hdr("AI-Model", "a", "AI-Model", "b"), "AI-Model", "given 2 times"},
		{"header block too large", hdr("Blob", strings.Repeat("x", semaq.DefaultMaxHeaderBytes)), "Blob", "the limit is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := semaq.Normalize(tc.h, now, semaq.NormalizeOptions{Stamp: true})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, semaq.ErrBadEnvelope) {
				t.Errorf("error %v does not match ErrBadEnvelope", err)
			}
			var ee *semaq.EnvelopeError
			if !errors.As(err, &ee) || !strings.Contains(ee.Header, tc.header) {
				t.Errorf("error %q does not name header %s", err, tc.header)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not say %q", err, tc.reason)
			}
		})
	}
}

func TestPriorityScale(t *testing.T) {
	for in, want := range map[string]semaq.Priority{
		"critical": 0, "HIGH": 2, "normal": 4, "Low": 6, "bulk": 8, "0": 0, "5": 5, "9": 9,
	} {
		got, err := semaq.ParsePriority(in)
		if err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "urgent", "-1", "10", "1.5", " high"} {
		if _, err := semaq.ParsePriority(bad); err == nil {
			t.Errorf("ParsePriority(%q) accepted", bad)
		}
	}
	if semaq.Priority(3).Level() != "high" || semaq.Priority(9).Level() != "bulk" || semaq.Priority(0).Level() != "critical" {
		t.Error("bands are wrong")
	}
}

// FuzzNormalize feeds arbitrary header names and values to the envelope
// parser: it must never panic, must leave only canonical envelope names
// behind, and what it accepts must parse again unchanged.
func FuzzNormalize(f *testing.F) {
	f.Add("AI-Priority", "high", "X-AI-Timeout", "8s")
	f.Add("x-trace-id", "4bf92f3577b34da6a3ce929d0e0e4736", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("AI-Deadline", "2026-01-02T15:04:05Z", "AI-Timeout", "1500")
	f.Add("AI-Prompt-Tokens", "-3", "Nats-TTL", "never")
	f.Add("ai-model", "llama3\n", "AI-MODEL", "x")
	f.Add("Status", "409", "Description", "Consumer Deleted")
	f.Add("AI-Prompt-Tokens", "+5", "AI-Schema-Id", "007")
	f.Add("Nats-TTL", "8000000000", "nats-rollup", "all")
	f.Add("nats-expected-last-sequence", "18446744073709551616", "Nats-Expected-Last-Subject-Sequence-Subject", "a.>")
	f.Add("Custom", "x\r\nNats-Rollup: all", "Bad Name", "x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := map[string][]string{}
		h[k1] = append(h[k1], v1)
		h[k2] = append(h[k2], v2)
		env, err := semaq.Normalize(h, now, semaq.NormalizeOptions{Stamp: true})
		if err != nil {
			if !errors.Is(err, semaq.ErrBadEnvelope) {
				t.Fatalf("error %v is not ErrBadEnvelope", err)
			}
			return
		}
		for name, vals := range h {
			if semaq.IsEnvelopeHeader(name) && !isCanonical(name) {
				t.Fatalf("non-canonical envelope header %q left in %v", name, h)
			}
			for _, v := range vals {
				checkWireSafe(t, name, v)
			}
			switch name {
			case semaq.HdrPromptTokens, semaq.HdrSchemaID, semaq.HdrExpectedLastSeq, semaq.HdrExpectedLastSubjSeq:
				if n, err := strconv.ParseUint(vals[0], 10, 64); err != nil || strconv.FormatUint(n, 10) != vals[0] {
					t.Fatalf("%s stored as %q, not canonical decimal", name, vals[0])
				}
			case semaq.HdrTTL:
				if n, err := strconv.ParseInt(vals[0], 10, 64); err == nil && (n < 1 || n > int64(semaq.MaxTTL/1e9)) {
					t.Fatalf("Nats-TTL %q accepted beyond the range", vals[0])
				}
				if d, err := time.ParseDuration(vals[0]); err == nil && (d < time.Second || d > semaq.MaxTTL) {
					t.Fatalf("Nats-TTL %q accepted beyond the range", vals[0])
				}
			}
		}
		env2, err := semaq.Parse(h, now)
		if err != nil {
			t.Fatalf("accepted headers %v do not parse again: %v", h, err)
		}
		if env2.Priority != env.Priority || env2.Model != env.Model || !env2.Deadline.Equal(env.Deadline) || env2.TraceParent != env.TraceParent {
			t.Fatalf("reparse differs: %+v vs %+v", env, env2)
		}
	})
}

func isCanonical(name string) bool {
	switch name {
	case semaq.HdrModel, semaq.HdrModelVersion, semaq.HdrAdapter, semaq.HdrPriority, semaq.HdrTenant,
		semaq.HdrIntent, semaq.HdrTimeout, semaq.HdrDeadline, semaq.HdrSession, semaq.HdrPromptTokens,
		semaq.HdrSchemaID, semaq.HdrTraceParent, semaq.HdrTraceState, semaq.HdrReceived, semaq.HdrMsgID, semaq.HdrTTL:
		return true
	}
	return false
}
