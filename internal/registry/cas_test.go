package registry

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// retryCAS runs an attempt again while it loses a compare-and-set, at most
// maxAttempts times; anything else ends it.
func TestRetryCAS(t *testing.T) {
	t.Parallel()
	conflictErr := fmt.Errorf("update: %w", jetstream.ErrKeyExists)
	for _, tc := range []struct {
		name      string
		loses     int   // attempts that lose before one does not
		then      error // what the first attempt that does not lose returns
		wantCalls int
		wantCode  int // 0: nil
	}{
		{"wins at once", 0, nil, 1, 0},
		{"wins after losing", 3, nil, 4, 0},
		{"wins on the last attempt", maxAttempts - 1, nil, maxAttempts, 0},
		{"loses every attempt", maxAttempts, nil, maxAttempts, CodeStore},
		{"fails otherwise", 2, errorf(CodeSubjectNotFound, "gone"), 3, CodeSubjectNotFound},
		{"times out", 0, casErr("storing the version", context.DeadlineExceeded), 1, CodeTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryCAS(func() error {
				calls++
				if calls <= tc.loses {
					return casErr("storing the version", conflictErr)
				}
				return tc.then
			})
			if calls != tc.wantCalls {
				t.Errorf("%d attempts, want %d", calls, tc.wantCalls)
			}
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("err %v, want nil", err)
				}
				return
			}
			e, ok := errors.AsType[*Error](err)
			if !ok || e.Code != tc.wantCode {
				t.Fatalf("err %v, want code %d", err, tc.wantCode)
			}
			if _, marked := errors.AsType[*lostError](err); marked {
				t.Fatalf("err %v still marked lost", err)
			}
		})
	}
}

// A loop inside an attempt that gives up (allocateID inside Register)
// ends the outer one too: its exhausted race is a store error, not a loss
// of the outer attempt.
func TestRetryCASNested(t *testing.T) {
	t.Parallel()
	outer, inner := 0, 0
	err := retryCAS(func() error {
		outer++
		return retryCAS(func() error {
			inner++
			return casErr("advancing the id counter", jetstream.ErrKeyExists)
		})
	})
	if outer != 1 || inner != maxAttempts {
		t.Fatalf("outer %d, inner %d attempts; want 1 and %d", outer, inner, maxAttempts)
	}
	wantCode(t, err, CodeStore)
}
