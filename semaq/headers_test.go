package semaq_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// reservedHeaders are headers nats-server or nats.go give a meaning a client
// must not be able to forge, in the spellings a hostile client would try.
var reservedHeaders = []struct{ name, value string }{
	// nats.go's pseudo-headers for a status line ("NATS/1.0 409 ...").
	{"Status", "409"},
	{"status", "503"},
	{"STATUS", "100"},
	{"Description", "Consumer Deleted"},
	{"description", "Idle Heartbeat"},
	// Stream mutation.
	{"Nats-Rollup", "all"},
	{"nats-rollup", "sub"},
	{"KV-Operation", "PURGE"},
	{"kv-operation", "DEL"},
	{"Nats-Marker-Reason", "MaxAge"},
	{"Nats-Incr", "1"},
	{"Nats-Counter-Sources", "{}"},
	// Schedules publish to another subject behind the ingress's back.
	{"Nats-Schedule", "@every 1s"},
	{"Nats-Schedule-Target", "ai.inference.x"},
	{"Nats-Schedule-TTL", "1s"},
	{"Nats-Schedule-Time-Zone", "UTC"},
	{"Nats-Schedule-Rollup", "sub"},
	{"Nats-Schedule-Source", "ai.x"},
	{"Nats-Scheduler", "ai.x"},
	{"Nats-Schedule-Next", "purge"},
	// Atomic batches: the ingress stores one message at a time.
	{"Nats-Batch-Id", "b1"},
	{"Nats-Batch-Sequence", "1"},
	{"Nats-Batch-Commit", "1"},
	// Direct get, republish and sourcing metadata.
	{"Nats-Stream", "AI"},
	{"Nats-Sequence", "1"},
	{"Nats-Time-Stamp", "2026-01-01T00:00:00Z"},
	{"Nats-Subject", "ai.x"},
	{"Nats-Last-Sequence", "0"},
	{"Nats-Num-Pending", "3"},
	{"Nats-UpTo-Sequence", "9"},
	{"Nats-Stream-Source", "SRC 1"},
	{"Nats-Msg-Size", "10"},
	// Consumer protocol: heartbeats, flow control, pull status, pinning.
	{"Nats-Last-Consumer", "1"},
	{"Nats-Last-Stream", "1"},
	{"Nats-Consumer-Stalled", "$JS.FC.x"},
	{"Nats-Pending-Messages", "1"},
	{"Nats-Pending-Bytes", "1"},
	{"Nats-Pin-Id", "p"},
	{"Nats-Response-Type", "x"},
	// Server identity, tracing, services.
	{"Nats-Request-Info", `{"acc":"SYS"}`},
	{"Nats-Trace-Dest", "_INBOX.trace"},
	{"Nats-Trace-Only", "true"},
	{"Nats-Trace-Hop", "1"},
	{"Nats-Trace-Origin-Account", "SYS"},
	{"Nats-Server-Xkey", "X"},
	{"Nats-Required-Api-Level", "1"},
	{"Nats-Stream-Identity", "x"},
	{"Nats-No-Masking", "true"},
	{"Nats-Service-Error", "boom"},
	{"Nats-Service-Error-Code", "500"},
	// Unknown Nats- headers, including future Nats-Expected-* conditions.
	{"Nats-Expected-Something-New", "1"},
	{"NATS-FUTURE-HEADER", "x"},
	{"Nats-", "x"},
}

func TestNormalizeRefusesReservedHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range reservedHeaders {
		t.Run(tc.name, func(t *testing.T) {
			h := hdr("AI-Model", "m", tc.name, tc.value)
			_, err := semaq.Normalize(h, now, semaq.NormalizeOptions{Stamp: true})
			checkEnvelopeErr(t, err, tc.name, "reserved")
			checkEnvelopeErr(t, semaq.CheckHeaders(hdr(tc.name, tc.value)), tc.name, "reserved")
			if !semaq.IsReservedHeader(tc.name) {
				t.Errorf("IsReservedHeader(%q) = false", tc.name)
			}
			if semaq.IsEnvelopeHeader(tc.name) {
				t.Errorf("IsEnvelopeHeader(%q) = true", tc.name)
			}
		})
	}
}

// TestNormalizeRefusesStatusLine decodes real status lines with nats.go, as
// the ingress receives them, and checks none can be stored.
func TestNormalizeRefusesStatusLine(t *testing.T) {
	t.Parallel()
	for _, block := range []string{
		"NATS/1.0 409 Consumer Deleted\r\n\r\n",
		"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\n\r\n",
		"NATS/1.0 503\r\n\r\n",
		"NATS/1.0 404 No Messages\r\nAI-Model: m\r\n\r\n",
		"NATS/1.0xyz\r\n\r\n",
	} {
		h, err := nats.DecodeHeadersMsg([]byte(block))
		if err != nil {
			if strings.HasPrefix(block, "NATS/1.0 ") {
				t.Fatalf("%q: %v", block, err)
			}
			continue // a malformed status line: nats.go refuses it itself
		}
		_, err = semaq.Normalize(h, now, semaq.NormalizeOptions{})
		var ee *semaq.EnvelopeError
		if !errors.As(err, &ee) || !semaq.IsReservedHeader(ee.Header) || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%q: Normalize = %v, want a reserved-header error", block, err)
		}
	}
}

func TestParseToleratesServerHeaders(t *testing.T) {
	t.Parallel()
	// A direct-get or republished message carries the server's own headers;
	// readers parse its envelope like any other.
	h := hdr("Nats-Stream", "AI", "Nats-Sequence", "7", "Nats-Subject", "ai.x",
		"Nats-Time-Stamp", "2026-01-01T00:00:00Z", "AI-Model", "m")
	env, err := semaq.Parse(h, now)
	if err != nil || env.Model != "m" {
		t.Fatalf("Parse = %+v, %v", env, err)
	}
}

func TestNormalizeAcceptsJetStreamClientHeaders(t *testing.T) {
	t.Parallel()
	h := hdr(
		"nats-expected-stream", "AI",
		"Nats-Expected-Last-Sequence", "0",
		"NATS-EXPECTED-LAST-SUBJECT-SEQUENCE", "9223372036854775807",
		"Nats-Expected-Last-Subject-Sequence-Subject", "ai.inference.*",
		"Nats-Expected-Last-Msg-Id", "m-1",
		"Nats-Msg-Id", "m-2",
		"Nats-TTL", "never",
	)
	_, err := semaq.Normalize(h, now, semaq.NormalizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"Nats-Expected-Stream":                        {"AI"},
		"Nats-Expected-Last-Sequence":                 {"0"},
		"Nats-Expected-Last-Subject-Sequence":         {"9223372036854775807"},
		"Nats-Expected-Last-Subject-Sequence-Subject": {"ai.inference.*"},
		"Nats-Expected-Last-Msg-Id":                   {"m-1"},
		"Nats-Msg-Id":                                 {"m-2"},
		"Nats-TTL":                                    {"never"},
	}
	if !maps.EqualFunc(h, want, func(a, b []string) bool { return len(a) == 1 && len(b) == 1 && a[0] == b[0] }) {
		t.Errorf("headers = %v, want %v (JetStream matches these names case-sensitively)", h, want)
	}
	for _, name := range []string{"Nats-Expected-Stream", "Nats-Msg-Id", "Nats-TTL", "AI-Model", "Content-Type", "X-Request-Id", "Statuses", "Descriptions", "KV-Op", "Nat-Rollup"} {
		if semaq.IsReservedHeader(name) {
			t.Errorf("IsReservedHeader(%q) = true", name)
		}
	}
}

func TestNormalizeRefusesMalformedHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		h      map[string][]string
		header string
		reason string
	}{
		{"empty name", hdr("", "x"), "", "empty header name"},
		{"name with space", hdr("Bad Name", "x"), "Bad Name", "header name"},
		{"name with colon", hdr("A:B", "x"), "A:B", "header name"},
		{"name with CRLF", hdr("A\r\nNats-Rollup", "all"), "A\r\nNats-Rollup", "header name"},
		{"name with non-ASCII", hdr("Modèle", "x"), "Modèle", "header name"},
		{"name with DEL", hdr("A\x7f", "x"), "A\x7f", "header name"},
		{"value with CRLF", hdr("Custom", "x\r\nNats-Rollup: all"), "Custom", "CR, LF or NUL"},
		{"value with LF", hdr("Custom", "x\nStatus: 409"), "Custom", "CR, LF or NUL"},
		{"value with CR", hdr("Custom", "x\ry"), "Custom", "CR, LF or NUL"},
		{"value with NUL", hdr("Custom", "x\x00"), "Custom", "CR, LF or NUL"},
		{"envelope value with CRLF", hdr("AI-Tenant", "a\r\n\r\n"), "AI-Tenant", "CR, LF or NUL"},
		{"second value with LF", map[string][]string{"Custom": {"ok", "a\nb"}}, "Custom", "CR, LF or NUL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := semaq.Normalize(tc.h, now, semaq.NormalizeOptions{})
			checkEnvelopeErr(t, err, tc.header, tc.reason)
			checkEnvelopeErr(t, semaq.CheckHeaders(tc.h), tc.header, tc.reason)
		})
	}
}

func TestCheckHeadersAccepts(t *testing.T) {
	t.Parallel()
	for _, h := range []map[string][]string{
		nil,
		{},
		hdr("Content-Type", "application/json", "X-Request-Id", "7", "AI-Model", "m"),
		hdr("Nats-Msg-Id", "x", "Nats-TTL", "1h", "Nats-Expected-Stream", "AI"),
		hdr("Custom", "tab\tand spaces and ünïcödé"),
		hdr("!#$%&'*+-.^_`|~09azAZ", "token characters"),
	} {
		if err := semaq.CheckHeaders(h); err != nil {
			t.Errorf("CheckHeaders(%v) = %v", h, err)
		}
	}
}

// numericCases: every numeric header refuses a non-canonical decimal; what
// it accepts is stored unchanged, so stored values are canonical.
func TestNumericHeadersCanonical(t *testing.T) {
	t.Parallel()
	refused := []struct{ value, reason string }{
		{"+5", "digits only"},
		{"-5", "digits only"},
		{" 5", "digits only"},
		{"5 ", "digits only"},
		{"5\t", "digits only"},
		{"05", "leading zero"},
		{"00", "leading zero"},
		{"1e3", "digits only"},
		{"0x10", "digits only"},
		{"5.0", "digits only"},
		{"1_000", "digits only"},
		{"١٢", "digits only"},
		{"", "empty"},
		{"99999999999999999999999", "exceeds"},
	}
	for _, tc := range []struct {
		header   string
		accepted []string
	}{
		{semaq.HdrPromptTokens, []string{"0", "5", "512", "100000000"}},
		{semaq.HdrSchemaID, []string{"0", "7", "2147483647"}},
		{semaq.HdrExpectedLastSeq, []string{"0", "42", "9223372036854775807"}},
		{semaq.HdrExpectedLastSubjSeq, []string{"0", "42", "9223372036854775807"}},
		{semaq.HdrTimeout, []string{"1", "1500", "604800000"}},
		{semaq.HdrTTL, []string{"1", "60", "315360000"}},
	} {
		for _, r := range refused {
			t.Run(tc.header+"/refuses "+r.value, func(t *testing.T) {
				_, err := semaq.Normalize(hdr(tc.header, r.value), now, semaq.NormalizeOptions{})
				if err == nil {
					t.Fatal("accepted")
				}
				var ee *semaq.EnvelopeError
				if !errors.As(err, &ee) || ee.Header != tc.header {
					t.Errorf("error %v does not name %s", err, tc.header)
				}
				// Timeout and TTL also take durations; their error for a
				// non-number is about both forms.
				if tc.header != semaq.HdrTimeout && tc.header != semaq.HdrTTL && !strings.Contains(err.Error(), r.reason) {
					t.Errorf("error %q does not say %q", err, r.reason)
				}
			})
		}
		for _, v := range tc.accepted {
			h := hdr(tc.header, v)
			if _, err := semaq.Normalize(h, now, semaq.NormalizeOptions{}); err != nil {
				t.Errorf("%s: %s refused: %v", tc.header, v, err)
			} else if got := h[tc.header]; len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s stored as %q", tc.header, v, got)
			}
		}
	}
}

func TestNumericHeaderLimits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ header, value, reason string }{
		{semaq.HdrPromptTokens, "100000001", "exceeds"},
		{semaq.HdrSchemaID, "2147483648", "exceeds"},
		{semaq.HdrExpectedLastSeq, "9223372036854775808", "exceeds"},
		{semaq.HdrExpectedLastSubjSeq, "99999999999999999999", "exceeds"},
		{semaq.HdrTimeout, "604800001", "exceeds"},
	} {
		_, err := semaq.Normalize(hdr(tc.header, tc.value), now, semaq.NormalizeOptions{})
		checkEnvelopeErr(t, err, tc.header, tc.reason)
	}
}

func TestTTLRange(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1", "1s", "60", "1h", "1m30s", "87600h", "315360000", "never", "Never", "NEVER"} {
		if _, err := semaq.Normalize(hdr("Nats-TTL", v), now, semaq.NormalizeOptions{}); err != nil {
			t.Errorf("Nats-TTL %s refused: %v", v, err)
		}
	}
	for _, tc := range []struct{ value, reason string }{
		{"8000000000", "exceeds"}, // the overflow that expired messages at once
		{"9223372036854775807", "exceeds"},
		{"9223372036854775808", "exceeds"},
		{"315360001", "exceeds"},
		{"87601h", "exceeds"},
		{"2562047h", "exceeds"},
		{"3000000h", "not a duration"}, // past time.Duration
		{"0", "at least 1"},
		{"500ms", "at least 1s"},
		{"0s", "at least 1s"},
		{"-1h", "at least 1s"},
		{"+1h", "sign"},
		{"+5", "not a duration"},
		{"05", "leading zero"},
		{" 5", "not a duration"},
		{"forever", "never"},
		{"nevermore", "never"},
		{"", "empty"},
	} {
		_, err := semaq.Normalize(hdr("Nats-TTL", tc.value), now, semaq.NormalizeOptions{})
		checkEnvelopeErr(t, err, "Nats-TTL", tc.reason)
	}
}

func TestTimeoutForms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ value, reason string }{
		{"+8s", "sign"},
		{"+1500", "not a duration"},
		{"01500", "leading zero"},
		{"1500 ", "not a duration"},
	} {
		_, err := semaq.Normalize(hdr("AI-Timeout", tc.value), now, semaq.NormalizeOptions{})
		checkEnvelopeErr(t, err, "AI-Timeout", tc.reason)
	}
}

func TestExpectedHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ header, value, reason string }{
		{"Nats-Expected-Stream", "A B", "visible ASCII"},
		{"Nats-Expected-Stream", "", "empty"},
		{"Nats-Expected-Last-Msg-Id", "a\tb", "visible ASCII"},
		{"Nats-Expected-Last-Subject-Sequence-Subject", "a..b", "empty token"},
		{"Nats-Expected-Last-Subject-Sequence-Subject", "a.>.b", "'>'"},
		{"Nats-Expected-Last-Sequence", "+1", "digits only"},
	} {
		_, err := semaq.Normalize(hdr(tc.header, tc.value), now, semaq.NormalizeOptions{})
		checkEnvelopeErr(t, err, tc.header, tc.reason)
	}
	_, err := semaq.Normalize(hdr("Nats-Expected-Stream", "A", "nats-expected-stream", "B"), now, semaq.NormalizeOptions{})
	checkEnvelopeErr(t, err, "xpected-", "given twice")
}

func checkEnvelopeErr(t *testing.T, err error, header, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted (want an error naming %q)", header)
	}
	if !errors.Is(err, semaq.ErrBadEnvelope) {
		t.Errorf("error %v does not match ErrBadEnvelope", err)
	}
	var ee *semaq.EnvelopeError
	if !errors.As(err, &ee) || !strings.Contains(ee.Header, header) {
		t.Errorf("error %q does not name header %q", err, header)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Errorf("error %q does not say %q", err, reason)
	}
}

// FuzzCheckHeaders: never panics, refusals are ErrBadEnvelope, and what is
// accepted has no reserved name and nothing that breaks the wire format.
func FuzzCheckHeaders(f *testing.F) {
	for _, r := range reservedHeaders {
		f.Add(r.name, r.value)
	}
	f.Add("Custom", "x\r\nStatus: 409")
	f.Add("A B", "x")
	f.Add("Nats-Msg-Id", "m")
	f.Fuzz(func(t *testing.T, name, value string) {
		err := semaq.CheckHeaders(map[string][]string{name: {value}})
		if err != nil {
			if !errors.Is(err, semaq.ErrBadEnvelope) {
				t.Fatalf("error %v is not ErrBadEnvelope", err)
			}
			return
		}
		checkWireSafe(t, name, value)
	})
}

func checkWireSafe(t *testing.T, name, value string) {
	t.Helper()
	if semaq.IsReservedHeader(name) {
		t.Fatalf("accepted reserved header %q", name)
	}
	ln := strings.ToLower(name)
	if ln == "status" || ln == "description" || ln == "kv-operation" || (strings.HasPrefix(ln, "nats-") && !allowedNats(ln)) {
		t.Fatalf("accepted %q", name)
	}
	if name == "" || strings.ContainsAny(name, ": \t\r\n") || strings.ContainsAny(value, "\r\n\x00") {
		t.Fatalf("accepted %q: %q", name, value)
	}
}

func allowedNats(ln string) bool {
	switch ln {
	case "nats-msg-id", "nats-ttl", "nats-expected-stream", "nats-expected-last-sequence",
		"nats-expected-last-subject-sequence", "nats-expected-last-subject-sequence-subject",
		"nats-expected-last-msg-id":
		return true
	}
	return false
}
