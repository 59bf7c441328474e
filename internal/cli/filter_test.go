package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
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

// sub --filter prints the broker's warning about a field the bound schema
// does not declare, and at the end how many messages lacked it.
func TestSubFilterWarningsAndStats(t *testing.T) {
	t.Parallel()
	srv, url := startWithStream(t)
	c := brokertest.Connect(t, srv)
	ctx := context.Background()
	if _, _, err := c.RegisterSchema(ctx, "scores-value", `{"type":"object","properties":{"confidence":{"type":"number"}}}`); err != nil {
		t.Fatal(err)
	}
	if err := c.BindSchema(ctx, "ai.scores", "scores-value"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustSemaq(t, url, "", "pub", "ai.scores", `{"confidence": 0.9}`)
	}
	// The schema is open: the misspelled field may be sent, and is the only
	// match. Matches come in stream order, so when it arrives the five
	// before it have been evaluated.
	mustSemaq(t, url, "", "pub", "ai.scores", `{"confidance": 0.9}`)
	r := runSemaq(t, url, "", "sub", "ai.scores", "--json", "--count", "1", "--timeout", "10s", "--filter", "payload.confidance > 0.8")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, `warning: payload.confidance: `) || !strings.Contains(r.stderr, `did you mean "confidence"?`) {
		t.Errorf("stderr has no warning about the field:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, "filter: 1 matched, 5 skipped, 5 errors (5 lacked a field the filter reads)") {
		t.Errorf("stderr has no filter stats:\n%s", r.stderr)
	}
	if got := seqs(parseMsgs(t, r.stdout)); !slices.Equal(got, []uint64{6}) {
		t.Errorf("got seqs %v, want 6", got)
	}
}
