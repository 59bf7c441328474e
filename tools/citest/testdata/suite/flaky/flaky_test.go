// Package flaky fails each of its tests on the first try of a run and passes
// on the next: the state is a marker file in $CITEST_STATE.
package flaky

import (
	"os"
	"path/filepath"
	"testing"
)

func firstTry(t *testing.T) bool {
	marker := filepath.Join(os.Getenv("CITEST_STATE"), filepath.Base(t.Name())+".tried")
	if _, err := os.Stat(marker); err == nil {
		return false
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

func TestFlaky(t *testing.T) {
	t.Log("the setup said this")
	if firstTry(t) {
		t.Fatal("first try fails: timing")
	}
}

func TestSub(t *testing.T) {
	t.Run("steady", func(t *testing.T) {})
	t.Run("inner", func(t *testing.T) {
		if firstTry(t) {
			t.Error("inner first try fails")
		}
	})
}

func TestSteady(t *testing.T) {}
