package semaq

import (
	"strings"
	"testing"
)

// Max is 1..MaxFetchBatch, as docs/http.md says: 0 is refused, not taken
// as 1, and the messages do not repeat "fetch:" (callers add it).
func TestFetchRequestCheckMax(t *testing.T) {
	for _, tc := range []struct {
		max  int
		want string
	}{
		{0, "max 0"},
		{-3, "max -3 is negative"},
		{MaxFetchBatch + 1, "is over"},
		{1, ""},
		{MaxFetchBatch, ""},
	} {
		r := FetchRequest{Worker: "w", Max: tc.max}
		err := r.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("max %d: %v", tc.max, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("max %d: %v, want an error naming %q", tc.max, err, tc.want)
		case err != nil && strings.HasPrefix(err.Error(), "fetch:"):
			t.Errorf("max %d: %q repeats the caller's prefix", tc.max, err)
		}
	}
}
