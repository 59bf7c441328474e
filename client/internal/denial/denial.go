// Package denial is how the SDK learns at once that the NATS server
// refused one of its requests. The server answers a publish its
// permissions refuse with an asynchronous -ERR, not on the request: left
// alone, a request the connection's user may not make would wait out its
// timeout. A Set turns that -ERR into the request's error at once
// (semaq.ErrForbidden), for the requests the client makes (request,
// PublishMsg, Fetch), and tells the watchers of a subscription the server
// refused (a live token reader's).
package denial

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// Set is the requests in flight, by subject, that a permissions
// violation on that subject fails. The zero Set is ready to use; it is
// safe for concurrent use.
type Set struct {
	mu      sync.Mutex
	waiting map[string]map[*denialWait]struct{}
	// matching are the requests whose subject nats.go chooses (an
	// ordered consumer's create names a consumer of its own): a refused
	// subject their func accepts fails them.
	matching map[*denialWait]func(subj string) bool
	// subscribed are the subscriptions, by subject, whose refusal by
	// the server is told to their func (a live token reader's).
	subscribed map[string]map[*subDenial]struct{}
}

type subDenial struct{ fail func(error) }

type denialWait struct{ cancel context.CancelCauseFunc }

// Watch returns ctx, failed with a forbidden error if the server refuses
// a publish to subj while the request is in flight, and the func that
// ends the watch.
func (d *Set) Watch(ctx context.Context, subj string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &denialWait{cancel: cancel}
	d.mu.Lock()
	if d.waiting == nil {
		d.waiting = make(map[string]map[*denialWait]struct{})
	}
	if d.waiting[subj] == nil {
		d.waiting[subj] = make(map[*denialWait]struct{})
	}
	d.waiting[subj][w] = struct{}{}
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(d.waiting[subj], w)
		if len(d.waiting[subj]) == 0 {
			delete(d.waiting, subj)
		}
		d.mu.Unlock()
		cancel(nil)
	}
}

// WatchMatch is Watch for requests on whatever subject match accepts.
func (d *Set) WatchMatch(ctx context.Context, match func(subj string) bool) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &denialWait{cancel: cancel}
	d.mu.Lock()
	if d.matching == nil {
		d.matching = make(map[*denialWait]func(string) bool)
	}
	d.matching[w] = match
	d.mu.Unlock()
	return ctx, func() {
		d.mu.Lock()
		delete(d.matching, w)
		d.mu.Unlock()
		cancel(nil)
	}
}

// WatchSubscription calls fail with a forbidden error if the server
// refuses a subscription to subj, until the returned func is called.
func (d *Set) WatchSubscription(subj string, fail func(error)) func() {
	w := &subDenial{fail: fail}
	d.mu.Lock()
	if d.subscribed == nil {
		d.subscribed = make(map[string]map[*subDenial]struct{})
	}
	if d.subscribed[subj] == nil {
		d.subscribed[subj] = make(map[*subDenial]struct{})
	}
	d.subscribed[subj][w] = struct{}{}
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(d.subscribed[subj], w)
		if len(d.subscribed[subj]) == 0 {
			delete(d.subscribed, subj)
		}
		d.mu.Unlock()
	}
}

// violation fails the requests in flight on the subject err names, when
// err is the server's refusal of a publish, and tells the watchers of a
// subscription the server refused.
func (d *Set) violation(err error) {
	if subj, ok := refused(err, "Subscription"); ok {
		if strings.HasPrefix(subj, sharedInbox) {
			d.inboxRefused(subj)
			return
		}
		cause := semaq.NewAPIError(semaq.ErrForbidden, "the NATS server refused a subscription to %s: this connection's user may not (its role and grants: semaq user info)", subj)
		d.mu.Lock()
		for w := range d.subscribed[subj] {
			w.fail(cause)
		}
		d.mu.Unlock()
		return
	}
	subj, ok := refused(err, "Publish")
	if !ok {
		return
	}
	cause := semaq.NewAPIError(semaq.ErrForbidden, "the NATS server refused publish to %s: this connection's user may not (its role and grants: semaq user info)", subj)
	d.mu.Lock()
	for w := range d.waiting[subj] {
		w.cancel(cause)
	}
	for w, match := range d.matching {
		if match(subj) {
			w.cancel(cause)
		}
	}
	d.mu.Unlock()
}

// sharedInbox is nats.go's default reply inbox prefix. With auth on, a
// user may listen on its own inbox only (_INBOX_<user>.), so a
// connection left on the default cannot get a single reply.
const sharedInbox = "_INBOX."

// inboxRefused fails every request in flight when the server refused the
// connection's reply inbox: none of them can be answered, and the
// server's words do not say why.
func (d *Set) inboxRefused(subj string) {
	cause := semaq.NewAPIError(semaq.ErrForbidden, "the NATS server refused this connection's reply inbox %s: with auth on a user "+
		"receives replies on its own inbox only, %s<user>; connect with client.WithKey, or client.WithUser with a certificate "+
		"or nkey (nats.go: nats.CustomInboxPrefix(%q))", subj, semaq.UserInboxPrefix, semaq.UserInboxPrefix+"<user>")
	d.mu.Lock()
	for _, ws := range d.waiting {
		for w := range ws {
			w.cancel(cause)
		}
	}
	for w := range d.matching {
		w.cancel(cause)
	}
	d.mu.Unlock()
}

// refusedPublish reads the subject of the server's publish permissions
// violation: `Permissions Violation for Publish to "<subject>"`.
func refusedPublish(err error) (string, bool) { return refused(err, "Publish") }

// refused reads the subject of the server's permissions violation of one
// kind (Publish, Subscription): `Permissions Violation for <kind> to
// "<subject>"`.
func refused(err error, kind string) (string, bool) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	lead := `Permissions Violation for ` + kind + ` to "`
	s := err.Error()
	i := strings.Index(s, lead)
	if i < 0 {
		return "", false
	}
	rest := s[i+len(lead):]
	j := strings.IndexByte(rest, '"')
	if j <= 0 {
		return "", false
	}
	return rest[:j], true
}

// Option makes the client see the connection's asynchronous errors first,
// then passes them to the handler the user set, if any.
func (d *Set) Option() nats.Option {
	return func(o *nats.Options) error {
		user := o.AsyncErrorCB
		o.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
			d.violation(err)
			if user != nil {
				user(nc, sub, err)
			}
		}
		return nil
	}
}

// Cause is the forbidden error ctx was failed with, or nil.
func Cause(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, semaq.ErrForbidden) {
		return cause
	}
	return nil
}
