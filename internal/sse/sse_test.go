package sse

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func readAll(t *testing.T, in string) []Event {
	t.Helper()
	r := NewReader(strings.NewReader(in), 0)
	var out []Event
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, ev)
	}
}

func TestReader(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []Event
	}{
		{"simple", "data: hello\n\n", []Event{{Data: "hello"}}},
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []Event{{Data: `{"a":1}`}, {Data: "[DONE]"}}},
		{"multiline", "data: a\ndata: b\n\n", []Event{{Data: "a\nb"}}},
		{"crlf and cr", "event: x\r\ndata:y\r\r", []Event{{Type: "x", Data: "y"}}},
		{"comments and keepalive", ": ping\n\n: hi\ndata: z\n\n", []Event{{Data: "z"}}},
		{"id carries over", "id: 7\ndata: a\n\ndata: b\n\n", []Event{{ID: "7", HasID: true, Data: "a"}, {ID: "7", Data: "b"}}},
		{"no data no event", "event: x\n\ndata: y\n\n", []Event{{Data: "y"}}},
		{"retry", "retry: 3000\ndata: r\n\n", []Event{{Retry: 3000, Data: "r"}}},
		{"bad retry ignored", "retry: 3s\ndata: r\n\n", []Event{{Data: "r"}}},
		{"unterminated dropped", "data: a\n\ndata: b", []Event{{Data: "a"}}},
		{"field without colon", "data\n\n", []Event{{Data: ""}}},
		{"only one space stripped", "data:  two\n\n", []Event{{Data: " two"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := readAll(t, tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLineTooLong(t *testing.T) {
	r := NewReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 50)
	if _, err := r.Next(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want ErrLineTooLong", err)
	}
}

func TestAppendEventRoundTrip(t *testing.T) {
	evs := []Event{
		{ID: "3", HasID: true, Type: "token", Data: `{"t":"a"}`},
		{Data: "line1\nline2\r\nline3\rline4"},
		{Type: "error", Data: ""},
	}
	var b []byte
	for _, ev := range evs {
		b = AppendEvent(b, ev)
	}
	got := readAll(t, string(b))
	want := []Event{
		{ID: "3", HasID: true, Type: "token", Data: `{"t":"a"}`},
		{ID: "3", Data: "line1\nline2\nline3\nline4"},
		{ID: "3", Type: "error", Data: ""},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("data: hello\n\n"))
	f.Add([]byte("id: 1\nevent: x\ndata: a\ndata: b\nretry: 10\n\n: c\n\r\n"))
	f.Add([]byte("data: [DONE]\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(strings.NewReader(string(in)), 1024)
		var evs []Event
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			evs = append(evs, ev)
			if len(evs) > len(in) {
				t.Fatalf("more events than input bytes")
			}
		}
		// Writing what was read and reading it again gives the same
		// events: the writer can represent anything the reader yields
		// (ids and types are single lines by construction).
		var b []byte
		for _, ev := range evs {
			ev.HasID = ev.ID != ""
			b = AppendEvent(b, ev)
		}
		r2 := NewReader(strings.NewReader(string(b)), 1<<20)
		for i, want := range evs {
			got, err := r2.Next()
			if err != nil {
				t.Fatalf("event %d: re-read: %v\n%q", i, err, b)
			}
			if got.Data != want.Data || got.Type != want.Type || got.Retry != want.Retry || (want.ID != "" && got.ID != want.ID) {
				t.Fatalf("event %d: %+v re-read as %+v", i, want, got)
			}
		}
	})
}
