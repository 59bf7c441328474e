package ingress

import (
	"strings"
	"testing"
)

func TestParseLatencyAck(t *testing.T) {
	const p = "_SQ_LAT.abc."
	for _, tc := range []struct {
		subject string
		ok      bool
		id      int
		ts      int64
		reply   string
	}{
		{p + "3.1700000000000000000._INBOX.x.y", true, 3, 1700000000000000000, "_INBOX.x.y"},
		{p + "0.1.r", true, 0, 1, "r"},
		{p + "x.1.r", false, 0, 0, ""},
		{p + "1.x.r", false, 0, 0, ""},
		{p + "1.1", false, 0, 0, ""},
		{p + "-1.1.r", false, 0, 0, ""},
		{p + "1.1.$SQ.w.ai.x", false, 0, 0, ""}, // never forward into a reserved namespace
		{"_SQ_LAT.other.1.1.r", false, 0, 0, ""},
	} {
		id, ts, reply, ok := parseLatencyAck(tc.subject, p)
		if ok != tc.ok || id != tc.id || ts != tc.ts || reply != tc.reply {
			t.Errorf("%s: got %d %d %q %v, want %d %d %q %v", tc.subject, id, ts, reply, ok, tc.id, tc.ts, tc.reply, tc.ok)
		}
	}
}

// The sampled-ack subject is built by the broker but arrives over NATS,
// where anyone allowed to publish could forge one.
func FuzzParseLatencyAck(f *testing.F) {
	const p = "_SQ_LAT.abc."
	f.Add(p + "3.1700000000000000000._INBOX.x.y")
	f.Add(p + "1.1.$JS.API.STREAM.DELETE.X")
	f.Add(p + "..")
	f.Fuzz(func(t *testing.T, subject string) {
		id, ts, reply, ok := parseLatencyAck(subject, p)
		if !ok {
			return
		}
		if id < 0 || ts <= 0 || reply == "" || strings.HasPrefix(reply, "$") || !strings.HasSuffix(subject, "."+reply) {
			t.Fatalf("%q parsed to %d %d %q", subject, id, ts, reply)
		}
	})
}
