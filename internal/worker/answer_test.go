package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

// An answer no dispatcher took (its queue failing over) is given again
// while the lease lasts; a refusal is final.
func TestRetryAnswer(t *testing.T) {
	unavailable := semaq.NewAPIError(semaq.ErrUnavailable, "nothing answers")
	for _, tc := range []struct {
		name  string
		errs  []error // what the broker answers, in turn; nil after
		until time.Duration
		calls int
		err   error
	}{
		{"taken after the failover", []error{unavailable, unavailable}, 10 * time.Second, 3, nil},
		{"lease lost is final", []error{semaq.NewAPIError(semaq.ErrLeaseLost, "gone")}, 10 * time.Second, 1, semaq.ErrLeaseLost},
		{"bad request is final", []error{semaq.NewAPIError(semaq.ErrBadRequest, "no")}, 10 * time.Second, 1, semaq.ErrBadRequest},
		{"not past the lease", []error{unavailable, unavailable, unavailable, unavailable}, 0, 1, semaq.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := retryAnswer(context.Background(), time.Now().Add(tc.until), func(context.Context) error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.calls || (tc.err == nil) != (err == nil) || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("%d calls, err %v; want %d calls, err %v", calls, err, tc.calls, tc.err)
			}
		})
	}
}
