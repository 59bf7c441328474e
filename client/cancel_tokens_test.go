package client

import (
	"strconv"
	"testing"
)

// The client remembers the tokens of its last maxKeptCancelTokens
// publishes, by message id and by sequence, and forgets the oldest.
func TestCancelTokensBounded(t *testing.T) {
	var ct cancelTokens
	ct.keep("Q", 1, "r1", "tok-1")
	if ct.token("Q", "r1") != "tok-1" || ct.token("Q", "1") != "tok-1" || ct.token("OTHER", "r1") != "" {
		t.Fatal("a kept token is not found by id and sequence in its stream only")
	}
	for i := 2; i <= maxKeptCancelTokens; i++ {
		ct.keep("Q", uint64(i), "", "tok-"+strconv.Itoa(i))
	}
	if len(ct.byKey) > maxKeptCancelTokens {
		t.Fatalf("%d tokens kept, want at most %d", len(ct.byKey), maxKeptCancelTokens)
	}
	if ct.token("Q", "r1") != "" && ct.token("Q", "1") != "" {
		t.Fatal("the oldest publish is still remembered past the bound")
	}
	if ct.token("Q", strconv.Itoa(maxKeptCancelTokens)) == "" {
		t.Fatal("the newest publish is forgotten")
	}
}
