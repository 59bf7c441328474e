package cli

import (
	"fmt"
	"slices"
	"testing"
)

func TestSubFilter(t *testing.T) {
	t.Parallel()
	_, url := startWithStream(t)
	for i := range 10 {
		mustSemaq(t, url, "", "pub", "ai.scores", fmt.Sprintf(`{"confidence": %g}`, float64(i)/10))
	}
	mustSemaq(t, url, "", "pub", "ai.scores", "not json")
	msgs := parseMsgs(t, mustSemaq(t, url, "", "sub", "ai.scores", "--json", "--count", "2", "--timeout", "10s",
		"--filter", "payload.confidence > 0.75"))
	if got := seqs(msgs); !slices.Equal(got, []uint64{9, 10}) {
		t.Errorf("sub --filter got seqs %v, want 9 and 10", got)
	}
	mustFailSemaq(t, url, "1:", "sub", "ai.scores", "--filter", "payload.confidence >", "--timeout", "10s")
	mustFailSemaq(t, url, "--filter", "sub", "ai.scores", "--filter", " ")
}
