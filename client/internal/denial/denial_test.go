package denial

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

func TestRefusedPublish(t *testing.T) {
	violation := func(s string) error { return fmt.Errorf("%w: %s", nats.ErrPermissionViolation, s) }
	for _, tc := range []struct {
		err  error
		subj string
		ok   bool
	}{
		{violation(`Permissions Violation for Publish to "$SQ.API.FILTER.START"`), "$SQ.API.FILTER.START", true},
		{violation(`permissions violation for publish to "x"`), "", false},
		{violation(`Permissions Violation for Subscription to "x"`), "", false},
		{violation(`Permissions Violation for Publish to ""`), "", false},
		{violation(`Permissions Violation for Publish to "unterminated`), "", false},
		{errors.New(`Permissions Violation for Publish to "x"`), "", false}, // not the server's -ERR
	} {
		subj, ok := refusedPublish(tc.err)
		if subj != tc.subj || ok != tc.ok {
			t.Errorf("%v: %q %v, want %q %v", tc.err, subj, ok, tc.subj, tc.ok)
		}
	}
}

// A violation fails the requests on its subject, and only those.
func TestDenialsFailTheRequestsOnTheSubject(t *testing.T) {
	var d Set
	on, doneOn := d.Watch(context.Background(), "a.b")
	defer doneOn()
	other, doneOther := d.Watch(context.Background(), "a.c")
	defer doneOther()
	d.violation(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "a.b"`))
	if err := Cause(on); !errors.Is(err, semaq.ErrForbidden) || !strings.Contains(err.Error(), "a.b") {
		t.Fatalf("request on the refused subject: %v", err)
	}
	if other.Err() != nil {
		t.Fatal("a request on another subject was failed")
	}
	doneOn()
	doneOther()
	if len(d.waiting) != 0 {
		t.Fatalf("watches left behind: %v", d.waiting)
	}
}

func FuzzRefusedPublish(f *testing.F) {
	f.Add(`Permissions Violation for Publish to "a.b"`)
	f.Add(`Permissions Violation for Publish to "`)
	f.Fuzz(func(t *testing.T, s string) {
		subj, ok := refusedPublish(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, s))
		if ok && (subj == "" || strings.Contains(subj, `"`)) {
			t.Fatalf("%q: subject %q", s, subj)
		}
	})
}

// A refused subscription is told to its watchers, and only to those; a
// refused publish of the same subject is not a refused subscription.
func TestDenialsTellRefusedSubscriptions(t *testing.T) {
	var d Set
	var got, other []error
	stop := d.WatchSubscription("$SQ.w.$tokl.acme.x.*", func(err error) { got = append(got, err) })
	stopOther := d.WatchSubscription("$SQ.w.$tokl.beta.x.*", func(err error) { other = append(other, err) })
	d.violation(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$SQ.w.$tokl.acme.x.*"`))
	if len(got) != 0 {
		t.Fatalf("a refused publish failed a subscription: %v", got)
	}
	d.violation(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Subscription to "$SQ.w.$tokl.acme.x.*"`))
	if len(got) != 1 || !errors.Is(got[0], semaq.ErrForbidden) || !strings.Contains(got[0].Error(), "$SQ.w.$tokl.acme.x.*") || len(other) != 0 {
		t.Fatalf("refused subscription: watcher got %v, other %v", got, other)
	}
	stop()
	stopOther()
	if len(d.subscribed) != 0 {
		t.Fatalf("watches left behind: %v", d.subscribed)
	}
}
