package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestIngressRoundTrip(t *testing.T) {
	for _, out := range []*Ingress{
		{Action: IngressPass},
		{Action: IngressReject, Reason: "no model named"},
		{Action: IngressRewrite, Header: map[string][]string{"A": {"1", "2"}, "B": {""}}, Data: []byte("new")},
		{Action: IngressEmit, Messages: []Message{
			{Subject: "a.b", Header: map[string][]string{"X": {"y"}}, Data: []byte("1")},
			{Subject: "audit.a.b", Data: []byte{}},
		}},
	} {
		got, err := DecodeIngress(AppendIngress(nil, out))
		if err != nil {
			t.Fatalf("%+v: %v", out, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(out) {
			t.Errorf("round trip of %+v gave %+v", out, got)
		}
	}
}

func TestInputRoundTrip(t *testing.T) {
	m := &Message{Subject: "s", Header: map[string][]string{"K": {"v1", "v2"}}, Data: []byte("payload")}
	b := AppendMessageInput(nil, m)
	if len(b) != MessageInputSize(m) {
		t.Fatalf("MessageInputSize %d, encoded %d", MessageInputSize(m), len(b))
	}
	got, err := DecodeMessageInput(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(m) {
		t.Fatalf("got %+v, %v", got, err)
	}
	stream, text, err := DecodeTokensInput(AppendTokensInput(nil, "st", "hello"))
	if err != nil || stream != "st" || text != "hello" {
		t.Fatalf("tokens input: %q %q %v", stream, text, err)
	}
}

// TestDecodeRefusesHostileOutput: each bound of the output holds, and the error says which.
func TestDecodeRefusesHostileOutput(t *testing.T) {
	u32 := func(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
	head := func(a byte) []byte { return []byte{Version, a} }
	many := &Ingress{Action: IngressEmit}
	for range MaxMessages + 1 {
		many.Messages = append(many.Messages, Message{Subject: "x"})
	}
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "version: buffer ends"},
		{"version", []byte{2, 0}, "version 2, want 1"},
		{"action", head(9), "unknown ingress action 9"},
		{"trailing", append(head(IngressPass), 0), "1 bytes left over"},
		{"reason too long", AppendIngress(nil, &Ingress{Action: IngressReject, Reason: strings.Repeat("r", MaxReason+1)}), "reason is 1025 bytes"},
		{"reason newline", AppendIngress(nil, &Ingress{Action: IngressReject, Reason: "a\nb"}), "line break"},
		{"length past end", u32(head(IngressReject), 100), "reason is 100 bytes, but only 0 are left"},
		{"too many messages", AppendIngress(nil, many), "65 messages, more than the 64 allowed"},
		{"count past end", u32(head(IngressEmit), 60), "60 messages cannot fit"},
		{"header count", u32(head(IngressRewrite), MaxHeaders+1), "257 header pairs"},
		{"header name colon", AppendIngress(nil, &Ingress{Action: IngressRewrite, Header: map[string][]string{"A:B": {"v"}}}), "holds a space, colon"},
		{"header value crlf", AppendIngress(nil, &Ingress{Action: IngressRewrite, Header: map[string][]string{"A": {"v\r\nB: c"}}}), "line break"},
		{"empty subject", AppendIngress(nil, &Ingress{Action: IngressEmit, Messages: []Message{{}}}), "subject is empty"},
		{"wildcard subject", AppendIngress(nil, &Ingress{Action: IngressEmit, Messages: []Message{{Subject: "a.>"}}}), "wildcard"},
		{"subject empty token", AppendIngress(nil, &Ingress{Action: IngressEmit, Messages: []Message{{Subject: "a..b"}}}), "empty token"},
		{"subject space", AppendIngress(nil, &Ingress{Action: IngressEmit, Messages: []Message{{Subject: "a b"}}}), "whitespace"},
		{"too big", append(head(IngressPass), make([]byte, MaxOutputBytes)...), "more than the 1048576 allowed"},
	}
	for _, c := range cases {
		_, err := DecodeIngress(c.b)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrMalformed saying %q", c.name, err, c.want)
		}
	}
	if _, err := DecodeTokens([]byte{Version, 7}); err == nil || !strings.Contains(err.Error(), "unknown tokens action 7") {
		t.Errorf("tokens action 7: %v", err)
	}
}

// FuzzDecodeOutput: whatever a plugin returns, decoding it never panics, never allocates past the bounds, and
// what it accepts encodes back to the same bytes' meaning.
func FuzzDecodeOutput(f *testing.F) {
	f.Add(AppendIngress(nil, &Ingress{Action: IngressRewrite, Header: map[string][]string{"A": {"1"}}, Data: []byte("x")}))
	f.Add(AppendIngress(nil, &Ingress{Action: IngressEmit, Messages: []Message{{Subject: "a", Data: []byte("1")}}}))
	f.Add(AppendIngress(nil, &Ingress{Action: IngressReject, Reason: "no"}))
	f.Add(AppendTokens(nil, &Tokens{Action: TokensRewrite, Text: "t"}))
	f.Add([]byte{Version, IngressEmit, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, err := DecodeTokens(b); err == nil {
			if !bytes.Equal(AppendTokens(nil, out), b) {
				t.Fatalf("tokens %+v re-encodes differently", out)
			}
		}
		out, err := DecodeIngress(b)
		if err != nil {
			return
		}
		if len(out.Messages) > MaxMessages || len(out.Header) > MaxHeaders {
			t.Fatalf("past the bounds: %d messages, %d headers", len(out.Messages), len(out.Header))
		}
		seen := fmt.Sprint(out)
		again, err := DecodeIngress(AppendIngress(nil, out))
		if err != nil || fmt.Sprint(again) != seen {
			t.Fatalf("re-encoding %+v: %+v, %v", out, again, err)
		}
		// The guest reuses its memory on the next call: nothing decoded may alias it.
		for i := range b {
			b[i] ^= 0xff
		}
		if fmt.Sprint(out) != seen {
			t.Fatal("the decoded output changed with the buffer it came from")
		}
	})
}
