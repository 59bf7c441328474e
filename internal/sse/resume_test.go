package sse

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

func TestResumeSeq(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		h      http.Header
		next   uint64
		ok     bool
		refuse bool
	}{
		{name: "none", h: http.Header{}},
		{name: "nil header", h: nil},
		{name: "empty", h: http.Header{"Last-Event-Id": {""}}},
		{name: "zero", h: http.Header{"Last-Event-Id": {"0"}}, next: 1, ok: true},
		{name: "number", h: http.Header{"Last-Event-Id": {"41"}}, next: 42, ok: true},
		{name: "leading zeros", h: http.Header{"Last-Event-Id": {"00000000000000000007"}}, next: 8, ok: true},
		{name: "largest that has a next", h: http.Header{"Last-Event-Id": {"18446744073709551614"}}, next: 1<<64 - 1, ok: true},
		{name: "largest uint64", h: http.Header{"Last-Event-Id": {"18446744073709551615"}}, refuse: true},
		{name: "over 20 digits", h: http.Header{"Last-Event-Id": {"000000000000000000001"}}, refuse: true},
		{name: "overflow", h: http.Header{"Last-Event-Id": {"99999999999999999999"}}, refuse: true},
		{name: "negative", h: http.Header{"Last-Event-Id": {"-1"}}, refuse: true},
		{name: "plus sign", h: http.Header{"Last-Event-Id": {"+1"}}, refuse: true},
		{name: "not a number", h: http.Header{"Last-Event-Id": {"abc"}}, refuse: true},
		{name: "huge", h: http.Header{"Last-Event-Id": {strings.Repeat("9", 200<<10)}}, refuse: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, ok, err := ResumeSeq(tc.h)
			if tc.refuse {
				if !errors.Is(err, ErrBadLastEventID) || ok {
					t.Fatalf("got %d, %v, %v; want ErrBadLastEventID", next, ok, err)
				}
				return
			}
			if err != nil || ok != tc.ok || next != tc.next {
				t.Fatalf("got %d, %v, %v; want %d, %v", next, ok, err, tc.next, tc.ok)
			}
		})
	}
}

func FuzzResumeSeq(f *testing.F) {
	for _, s := range []string{"", "0", "7", "18446744073709551615", "-1", "x", "000000000000000000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		next, ok, err := ResumeSeq(http.Header{"Last-Event-Id": {id}})
		switch {
		case err != nil:
			if ok || !errors.Is(err, ErrBadLastEventID) {
				t.Fatalf("%q: %d, %v, %v", id, next, ok, err)
			}
		case id == "":
			if ok {
				t.Fatalf("empty id resumes at %d", next)
			}
		default:
			n, perr := strconv.ParseUint(id, 10, 64)
			if !ok || perr != nil || next != n+1 || next == 0 || len(id) > 20 {
				t.Fatalf("%q accepted as resuming at %d", id, next)
			}
		}
	})
}
