// Package httpauth is the vocabulary shared by the HTTP front door's
// packages (internal/httpapi, internal/gateway) when the node runs with
// auth on: who sent a request (its Caller, in the request's context) and
// the bounded pool of broker connections that act with each key's rights
// (pool.go). docs/security.md, "HTTP door", is the contract.
package httpauth

import (
	"context"
	"fmt"
	"strings"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
)

// Caller is the authenticated sender of an HTTP request.
type Caller struct {
	identity.Principal
	// Client is a broker connection authenticated with the caller's key:
	// what goes through NATS for this request goes through it, with the
	// key's rights. Nil for endpoints served in process.
	Client *client.Client
	// Changed is closed at the identity store's next change, and Recheck
	// then tells whether the caller's key is still valid (nil) or why
	// not: answers that stream (SSE) end when the key is revoked. Nil
	// without auth.
	Changed func() <-chan struct{}
	Recheck func() error
}

type callerKey struct{}

// WithCaller returns ctx carrying c, and c as the broker's principal
// (what the broker serves in process records it: the audit).
func WithCaller(ctx context.Context, c *Caller) context.Context {
	ctx = api.WithHTTPPrincipal(ctx, api.Principal{Who: api.User, User: c.User, Tenant: c.Tenant, Role: c.Role})
	return context.WithValue(ctx, callerKey{}, c)
}

// From returns the caller of a request's context, nil with auth off.
func From(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// ClientOr is the caller's connection when ctx has one, def otherwise:
// the front door's own connection with auth off.
func ClientOr(ctx context.Context, def *client.Client) *client.Client {
	if c := From(ctx); c != nil && c.Client != nil {
		return c.Client
	}
	return def
}

// Action is what a caller does on a subject, for May.
type Action string

// Actions checked by May.
const (
	Publish Action = "publish on"
	Read    Action = "read"
)

// May says whether the caller's role and subject grants allow act on
// subject (which may hold wildcards when reading). It mirrors the
// permissions the NATS server enforces on the caller's connection
// (internal/broker/auth/roles.go); the front door checks it first so a
// refusal is a prompt 403, not a request that times out.
func (c *Caller) May(act Action, subject string) bool {
	switch {
	case c.Role == semaq.RoleAdmin:
		return true
	case act == Publish && c.Role != semaq.RolePublisher && c.Role != semaq.RoleService,
		act == Read && c.Role != semaq.RoleReader && c.Role != semaq.RoleService:
		return false
	}
	for _, g := range c.Subjects {
		if SubjectWithin(subject, g) {
			return true
		}
	}
	return false
}

// Refusal is the message of a 403 for act on subject.
func (c *Caller) Refusal(act Action, subject string) string {
	grants := "none"
	if len(c.Subjects) > 0 {
		grants = strings.Join(c.Subjects, ", ")
	}
	return fmt.Sprintf("user %s (role %s) may not %s %s; its subjects: %s", c.User, c.Role, act, subject, grants)
}

// SubjectWithin says whether every subject that subject matches (it may
// have wildcards) is matched by grant: NATS's subset rule.
func SubjectWithin(subject, grant string) bool {
	st, gt := strings.Split(subject, "."), strings.Split(grant, ".")
	for i, g := range gt {
		if g == ">" {
			return len(st) > i
		}
		if i >= len(st) {
			return false
		}
		switch s := st[i]; {
		case s == ">":
			return false
		case g == "*":
		case s != g:
			return false
		}
	}
	return len(st) == len(gt)
}
