package keyhash

import "testing"

// The hash picks split targets and key owners on every node: it must not
// change between releases, or keys move when a cluster is upgraded.
func TestOfIsStable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want uint64
	}{
		{"", 0xefd01f60ba992926},
		{"user-1", 0x41a2fca5c68401c5},
		{"user-2", 0xa9f4ad0c2263143b},
	} {
		if got := Of(tc.key); got != tc.want {
			t.Errorf("Of(%q) = %#x, want %#x", tc.key, got, tc.want)
		}
	}
}
