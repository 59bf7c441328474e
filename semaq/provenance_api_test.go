package semaq

import (
	"strings"
	"testing"
)

func TestParseOrder(t *testing.T) {
	for _, tc := range []struct {
		order, v string
		ok       bool
	}{
		{SessionOrderStrict, "2026-12-07T12:00:00Z", true},
		{SessionOrderStrict, "2026-12-07T12:00:00.123456789+01:00", true},
		{SessionOrderStrict, "2026-12-07 12:00:00", false},
		{SessionOrderStrict, "0001-01-01T00:00:00Z", false}, // outside Unix nanoseconds
		{SessionOrderStrictSeq, "1", true},
		{SessionOrderStrictSeq, "0", false},
		{SessionOrderStrictSeq, "+5", false},
		{SessionOrderStrictSeq, "-5", false},
		{SessionOrderStrictSeq, "18446744073709551615", false}, // past MaxExpectedSeq
	} {
		_, err := ParseOrder(tc.order, tc.v)
		if (err == nil) != tc.ok {
			t.Errorf("ParseOrder(%s, %q) = %v, want ok %v", tc.order, tc.v, err, tc.ok)
		}
	}
	a, _ := ParseOrder(SessionOrderStrict, "2026-12-07T12:00:00Z")
	b, _ := ParseOrder(SessionOrderStrict, "2026-12-07T13:00:00+01:00") // the same instant
	if b.After(a) || a.After(b) {
		t.Fatal("the same instant in two zones is ordered")
	}
}

// FuzzParseOrder: the order headers come from clients. Whatever parses
// names a value that orders consistently and prints as given.
func FuzzParseOrder(f *testing.F) {
	for _, s := range []string{"2026-12-07T12:00:00Z", "1", "99999999999999999999", "2026-13-01T00:00:00Z", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, order := range []string{SessionOrderStrict, SessionOrderStrictSeq} {
			o, err := ParseOrder(order, v)
			if err != nil {
				if !strings.Contains(err.Error(), OrderHeader(order)) {
					t.Fatalf("error %q does not name %s", err, OrderHeader(order))
				}
				continue
			}
			if o.Text != v || o.After(o) {
				t.Fatalf("%s %q: %+v", order, v, o)
			}
		}
	})
}
