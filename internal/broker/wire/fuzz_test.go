package wire

import (
	"bytes"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzDecodeHeader holds DecodeHeader to nats.go's decoder: the same
// header map, or both refuse.
func FuzzDecodeHeader(f *testing.F) {
	for _, s := range []string{
		"NATS/1.0\r\nA: b\r\n\r\n",
		"NATS/1.0 503\r\n\r\n",
		"NATS/1.0 408 Request Timeout\r\nA:b\r\nA:  c\r\n\r\n",
		"NATS/1.0\r\n: x\r\nk\r\n\r\n",
		"NATS/1.0\r\nA: b\r\n",
		"NATS/1.0 1\r\n\r\n",
		"NATS/1.0\nk:v\n\n",
		"NATS/1.0\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nAI-Model: m\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := nats.DecodeHeadersMsg(b)
		got, err := DecodeHeader(string(b))
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%q: error %v, nats.go %v", b, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(normal(got), normal(want)) {
			t.Fatalf("%q: decoded %v, nats.go %v", b, got, want)
		}
	})
}

func normal(h nats.Header) map[string][]string {
	m := make(map[string][]string, len(h))
	for k, v := range h {
		m[k] = slices.Clone(v)
	}
	return m
}

// FuzzAppendHeader: what AppendHeader writes, nats.go reads back as the
// header map nats.go would have sent (values trimmed, CR and LF as
// spaces), and appending to a header decoded from the block changes
// nothing of the others.
func FuzzAppendHeader(f *testing.F) {
	f.Add("AI-Model", "m", "Multi", " a\r\nb ")
	f.Add("k", "", "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := nats.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		b, err := AppendHeader(nil, h)
		if !validKey(k1) || !validKey(k2) {
			if err == nil {
				t.Fatalf("keys %q %q accepted", k1, k2)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeHeader(string(b))
		if err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		want := nats.Header{}
		for k, vs := range h {
			for _, v := range vs {
				vb := []byte(trimSpace(v))
				for i, c := range vb {
					if c == '\r' || c == '\n' {
						vb[i] = ' '
					}
				}
				v = string(vb)
				// nats.go's reader drops leading spaces a CR/LF left.
				for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
					v = v[1:]
				}
				want.Add(k, v)
			}
		}
		if !reflect.DeepEqual(normal(back), normal(want)) {
			t.Fatalf("%v written as %q, read back as %v", h, b, back)
		}
		if nb, err := nats.DecodeHeadersMsg(b); err != nil || !maps.EqualFunc(nb, back, slices.Equal) {
			t.Fatalf("nats.go reads %q as %v (%v)", b, nb, err)
		}
	})
}

// FuzzParseFrame: any input either parses, asks for more or is refused,
// never panics; a MSG it parses is what was framed.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte("MSG a.b 1 _INBOX.x 3\r\nabc\r\n"), "a.b", "r", []byte("NATS/1.0\r\n\r\n"), []byte("data"))
	f.Add([]byte("HMSG a 2 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"), "s", "", []byte(nil), []byte(""))
	f.Add([]byte("PING\r\nPONG\r\n+OK\r\n-ERR 'x'\r\nINFO {}\r\n"), "x", "y", []byte(nil), []byte("z"))
	f.Fuzz(func(t *testing.T, raw []byte, subject, reply string, hdr, data []byte) {
		for b := raw; len(b) > 0; {
			fr, n, err := parseFrame(b, 1<<20)
			if err != nil || n == 0 {
				break
			}
			if n > len(b) || fr.op == opNone {
				t.Fatalf("%q: took %d bytes as op %d", b, n, fr.op)
			}
			b = b[n:]
		}
		if !validSubject(subject) || (reply != "" && !validSubject(reply)) || bytes.Contains([]byte(subject+reply), []byte("\n")) {
			return
		}
		var msg []byte
		if len(hdr) > 0 {
			msg = append(msg, "HMSG "+subject+" 7 "...)
		} else {
			msg = append(msg, "MSG "+subject+" 7 "...)
		}
		if reply != "" {
			msg = append(msg, reply+" "...)
		}
		if len(hdr) > 0 {
			msg = strconv.AppendInt(msg, int64(len(hdr)), 10)
			msg = append(msg, ' ')
		}
		msg = strconv.AppendInt(msg, int64(len(hdr)+len(data)), 10)
		msg = append(msg, "\r\n"...)
		msg = append(msg, hdr...)
		msg = append(msg, data...)
		msg = append(msg, "\r\n"...)
		fr, n, err := parseFrame(msg, 1<<20)
		if err != nil || n != len(msg) {
			t.Fatalf("%q: %d bytes, %v", msg, n, err)
		}
		if string(fr.subject) != subject || string(fr.reply) != reply || fr.sid != 7 || !bytes.Equal(fr.hdr, hdr) || !bytes.Equal(fr.data, data) {
			t.Fatalf("%q parsed as %+v", msg, fr)
		}
		if _, n, _ := parseFrame(msg[:len(msg)-1], 1<<20); n != 0 {
			t.Fatalf("%q: parsed without its last byte", msg)
		}
	})
}
