package broken

import "testing"

func TestAlways(t *testing.T) { t.Fatal("always fails: a real bug") }

func TestFine(t *testing.T) {}
