package quietlog

import "testing"

func TestGateLogsOncePerReason(t *testing.T) {
	var g Gate
	if !g.Open("a") {
		t.Fatal("the first line of a reason was held back")
	}
	if g.Open("a") {
		t.Fatal("a second line of the same reason within a second was let through")
	}
	if !g.Open("b") {
		t.Fatal("another reason was held back by the first")
	}
}
