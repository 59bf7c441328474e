package upstream

import "testing"

func TestPromptTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prompt string
		want   int
	}{
		{"", 0},
		{"   \n\t ", 0},
		{"user: hello", 2},
		{"system: be brief\nuser:  what  is\ta broker?", 8},
	} {
		if got := PromptTokens(tc.prompt); got != tc.want {
			t.Errorf("PromptTokens(%q) = %d, want %d", tc.prompt, got, tc.want)
		}
	}
}
