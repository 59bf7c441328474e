package semaq_test

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/semaq/semaq/semaq"
)

// literalSubjectCases hold the refusals shared by publish and reply
// subjects: reason is a fragment of the error.
var literalSubjectCases = []struct {
	name, subject, reason string
}{
	{"empty", "", "empty"},
	{"star token", "ai.inference.*", "wildcard"},
	{"star first", "*.inference", "wildcard"},
	{"gt token", "ai.inference.>", "wildcard"},
	{"gt alone", ">", "wildcard"},
	{"star inside token", "ai.infer*", "wildcard"},
	{"gt inside token", "ai.a>b", "wildcard"},
	{"empty middle token", "a..b", "empty token"},
	{"leading dot", ".a.b", "empty token"},
	{"trailing dot", "a.b.", "trailing dot"},
	{"only a dot", ".", "empty token"},
	{"space", "ai.in ference", "whitespace"},
	{"tab", "ai.\tx", "whitespace"},
	{"newline", "ai.x\r\nPUB $JS.API 0", "whitespace"},
	{"nul", "ai.x\x00", "control"},
	{"del", "ai.x\x7f", "control"},
	{"c1 control", "ai.x\u0085", "whitespace or control"},
	{"no-break space", "ai.x\u00a0y", "whitespace"},
	{"ideographic space", "ai.\u3000", "whitespace"},
	{"line separator", "ai.x\u2028", "whitespace"},
	{"invalid utf8", "ai.\xff", "invalid UTF-8"},
	{"truncated utf8", "ai.\xe2\x82", "invalid UTF-8"},
	{"encoded surrogate", "ai.\xed\xa0\x80", "invalid UTF-8"},
	{"overlong encoding", "ai.\xc0\xae", "invalid UTF-8"},
	{"bidi override", "ai.\u202euser", "formatting"},
	{"bidi isolate", "ai.x\u2066y", "formatting"},
	{"right-to-left mark", "ai.\u200fx", "formatting"},
	{"zero-width space", "ai.x\u200by", "formatting"},
	{"byte order mark", "\ufeffai.x", "formatting"},
	{"too long", strings.Repeat("a.", semaq.MaxSubjectLen/2) + "a", "the limit is 1024"},
	{"dollar JS API", "$JS.API.STREAM.PURGE.AI", "reserved"},
	{"dollar KV", "$KV.SQ_ROUTES.r1", "reserved"},
	{"dollar SQ storage", "$SQ.w.ai.inference.x", "reserved"},
	{"dollar SYS", "$SYS.REQ.SERVER.PING", "reserved"},
	{"dollar alone", "$", "reserved"},
	{"broker ack inbox", "_SQ_ACK.abc._INBOX.x", "reserved"},
	{"broker latency inbox", "_SQ_LAT.abc.1", "reserved"},
}

var literalSubjectAccepted = []string{
	"ai",
	"ai.inference.llama3",
	"ai.inference.meta-llama/Llama-3.1-8B-Instruct",
	"ai.infer.qwen3:72b",
	"a.b.c.d.e.f.g.h",
	"ai.模型.推理",
	"ai.café",
	"ai.\U0001F916",
	"x$y.z",
	"ai.$x", // '$' only reserved as the first character
	"_SQ",
	"_SQX.y",
	"_sq_.lower", // subjects are case-sensitive; only _SQ_ is the broker's
	strings.Repeat("a.", semaq.MaxSubjectLen/2-1) + "ab",
}

func TestCheckPublishSubject(t *testing.T) {
	t.Parallel()
	for _, tc := range literalSubjectCases {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			checkRefused(t, semaq.CheckPublishSubject(tc.subject), "publish subject", tc.reason)
		})
	}
	for _, s := range append(literalSubjectAccepted, "_INBOX.abc.def") {
		if err := semaq.CheckPublishSubject(s); err != nil {
			t.Errorf("CheckPublishSubject(%.40q) = %v, want nil", s, err)
		}
	}
	if len(literalSubjectAccepted[len(literalSubjectAccepted)-1]) != semaq.MaxSubjectLen {
		t.Fatal("the longest accepted case is not MaxSubjectLen bytes")
	}
}

func TestCheckReplySubject(t *testing.T) {
	t.Parallel()
	cases := append(literalSubjectCases[:len(literalSubjectCases):len(literalSubjectCases)],
		struct{ name, subject, reason string }{"JS ack subject", "$JS.ACK.AI.c.1.5.5.0.0", "reserved"},
		struct{ name, subject, reason string }{"object store", "$O.bucket.C.x", "reserved"},
		struct{ name, subject, reason string }{"JS event", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.AI.c", "reserved"},
		struct{ name, subject, reason string }{"wildcard inbox", "_INBOX.*", "wildcard"},
		struct{ name, subject, reason string }{"full wildcard inbox", "_INBOX.>", "wildcard"},
	)
	for _, tc := range cases {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			checkRefused(t, semaq.CheckReplySubject(tc.subject), "reply subject", tc.reason)
		})
	}
	for _, s := range append(literalSubjectAccepted,
		"_INBOX.3n8qR3Ik0xQKGX4ay0Abcd.7",
		"_INBOX.abc",
		"my-app.inbox.42",
		"_MYAPP_INBOX.x.y",
	) {
		if err := semaq.CheckReplySubject(s); err != nil {
			t.Errorf("CheckReplySubject(%.40q) = %v, want nil", s, err)
		}
	}
}

func checkRefused(t *testing.T, err error, kind, reason string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	if !errors.Is(err, semaq.ErrBadSubject) {
		t.Errorf("error %v does not match ErrBadSubject", err)
	}
	var se *semaq.SubjectError
	if !errors.As(err, &se) || se.Kind != kind {
		t.Errorf("error %v is not a SubjectError of kind %q", err, kind)
	}
	if !strings.Contains(err.Error(), reason) {
		t.Errorf("error %q does not say %q", err, reason)
	}
	if len(err.Error()) > 400 {
		t.Errorf("error is %d bytes: a hostile subject must not make it large", len(err.Error()))
	}
}

func TestCheckSubjectAcceptedDoesNotAllocate(t *testing.T) {
	for _, s := range []string{"ai.inference.llama3", "_INBOX.3n8qR3Ik0xQKGX4ay0Abcd.7", "ai.模型.推理"} {
		if n := testing.AllocsPerRun(100, func() {
			_ = semaq.CheckPublishSubject(s)
			_ = semaq.CheckReplySubject(s)
		}); n != 0 {
			t.Errorf("%s: %v allocations per check, want 0", s, n)
		}
	}
}

func BenchmarkCheckPublishSubject(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if err := semaq.CheckPublishSubject("ai.inference.meta-llama.Llama-3.1-8B-Instruct"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCheckPublishSubject: never panics; refusals match ErrBadSubject; what
// is accepted is a literal, printable, unreserved subject that the general
// syntax check (CheckSubject without wildcards) accepts too.
func FuzzCheckPublishSubject(f *testing.F) {
	for _, tc := range literalSubjectCases {
		f.Add(tc.subject)
	}
	for _, s := range literalSubjectAccepted {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkLiteralInvariants(t, s, semaq.CheckPublishSubject(s))
	})
}

// FuzzCheckReplySubject: as FuzzCheckPublishSubject, for reply subjects.
func FuzzCheckReplySubject(f *testing.F) {
	for _, tc := range literalSubjectCases {
		f.Add(tc.subject)
	}
	f.Add("_INBOX.abc.def")
	f.Add("$JS.ACK.AI.c.1.5.5.0.0")
	f.Fuzz(func(t *testing.T, s string) {
		checkLiteralInvariants(t, s, semaq.CheckReplySubject(s))
	})
}

func checkLiteralInvariants(t *testing.T, s string, err error) {
	if err != nil {
		if !errors.Is(err, semaq.ErrBadSubject) {
			t.Fatalf("error %v is not ErrBadSubject", err)
		}
		return
	}
	if s == "" || len(s) > semaq.MaxSubjectLen || !utf8.ValidString(s) {
		t.Fatalf("accepted %q: empty, too long or invalid UTF-8", s)
	}
	if strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_SQ_") {
		t.Fatalf("accepted reserved %q", s)
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || strings.ContainsAny(tok, "*>") {
			t.Fatalf("accepted %q: empty token or wildcard", s)
		}
	}
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			t.Fatalf("accepted %q with %U", s, r)
		}
	}
	if err := semaq.CheckSubject(s, false); err != nil {
		t.Fatalf("accepted %q that CheckSubject refuses: %v", s, err)
	}
}
