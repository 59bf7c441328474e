package semaq

import "testing"

func TestNameToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"llama3-70b_v2", 96, "llama3-70b_v2"},
		{"meta/llama3.1:8b", 96, "meta_llama3_1_8b-"},
		{"abcdef", 3, "abc-"},
	} {
		got := NameToken(tc.in, tc.max)
		if len(tc.want) > 0 && tc.want[len(tc.want)-1] == '-' {
			// A replaced or cut name carries an 8-digit hash of the whole name.
			if len(got) != len(tc.want)+8 || got[:len(tc.want)] != tc.want {
				t.Errorf("NameToken(%q, %d) = %q, want %q + hash", tc.in, tc.max, got, tc.want)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("NameToken(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
	if NameToken("a.b", 96) == NameToken("a_b", 96) {
		t.Error("distinct names map to one token")
	}
}
