// Package auth authenticates the NATS door of a node started with auth on
// (docs/security.md, Identities). The embedded NATS server calls
// Authenticator.Check for every client connection
// (server.Options.CustomClientAuthentication); it admits
//
//   - the node's own users and operators, by their nkey signature over the
//     server's nonce, with the permissions they have without auth;
//   - clients presenting a key of the identity store, as the connect token
//     or as user <name> password <key>, with the permissions of their role
//     (roles.go);
//   - store users by their nkey signature, or by the subject of a TLS
//     client certificate the server verified, when they present no key
//     (credential.go).
//
// Everyone else is refused. Node users and operators stay in the
// server's global account, where the broker lives; store users go to the
// account of their tenant (internal/broker/tenancy.go), whence the broker
// learns who sent what.
package auth

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/internal/identity"
)

// Deps is what the authenticator needs from the node.
type Deps struct {
	// NodeUsers maps the public nkey of each node user and operator to
	// its permissions (nil: every right).
	NodeUsers map[string]*server.Permissions
	// Rules make the permissions of store users.
	Rules Rules
	// Account is the NATS account of user's tenant ("": users without
	// a tenant), made ready for user (its inbox); never the node's own
	// account. Nil keeps store users in the account the server gives
	// them (tests of roles alone).
	Account func(tenant, user string) (*server.Account, error)
	// Limiter slows down repeated failures; nil is DefaultLimiter().
	Limiter *Limiter
	// Failed counts one refused connection, reason "nkey", "no_key",
	// "bad_key", "unknown_key" or "cert"; nil counts nothing.
	Failed func(reason string)
	// Log gets refusals at debug level, never a key. Nil logs nothing.
	Log *slog.Logger
}

// Authenticator is the node's server.Authentication. Until SetStore, only
// node users and operators are admitted. Safe for concurrent use.
type Authenticator struct {
	deps  Deps
	store atomic.Pointer[identity.Store]
}

// New makes an authenticator.
func New(deps Deps) *Authenticator {
	if deps.Limiter == nil {
		deps.Limiter = DefaultLimiter()
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Account == nil {
		deps.Account = func(string, string) (*server.Account, error) { return nil, nil }
	}
	return &Authenticator{deps: deps}
}

// SetStore starts authenticating store users.
func (a *Authenticator) SetStore(s *identity.Store) { a.store.Store(s) }

// Limiter is the failure limiter, for tests and metrics.
func (a *Authenticator) Limiter() *Limiter { return a.deps.Limiter }

// Check implements server.Authentication.
func (a *Authenticator) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	ip := remoteIP(c.RemoteAddress())
	if d := a.deps.Limiter.Delay(ip); d > 0 {
		time.Sleep(d)
	}
	reason := a.check(c)
	if reason == "" {
		a.deps.Limiter.Succeed(ip)
		return true
	}
	a.deps.Limiter.Fail(ip)
	if a.deps.Failed != nil {
		a.deps.Failed(reason)
	}
	a.deps.Log.Debug("nats connection refused", "remote", ip, "cid", c.GetID(), "reason", reason)
	return false
}

// check admits c or says why not.
func (a *Authenticator) check(c server.ClientAuthentication) string {
	o := c.GetOpts()
	if o.Nkey != "" {
		perms, ok := a.deps.NodeUsers[o.Nkey]
		if !ok {
			return a.checkNkey(c, o) // a store user's nkey (credential.go)
		}
		if !verifyNkey(o.Nkey, o.Sig, c.GetNonce()) {
			return "nkey"
		}
		c.RegisterUser(&server.User{Permissions: perms})
		return ""
	}
	key := o.Token
	if key == "" {
		key = o.Password
	}
	if key == "" {
		if cert := verifiedLeaf(c); cert != nil {
			return a.checkCert(c, o, cert) // credential.go
		}
		return "no_key"
	}
	s := a.store.Load()
	if s == nil {
		return "unknown_key"
	}
	p, err := s.Authenticate(key)
	switch {
	case errors.Is(err, identity.ErrBadKey):
		return "bad_key"
	case errors.Is(err, identity.ErrExpiredKey):
		return "expired_key"
	case err != nil:
		return "unknown_key"
	}
	if o.Token == "" && o.Username != p.User {
		// user/password: the user must be the key's.
		return "unknown_key"
	}
	return a.admit(c, p, "unknown_key", func() bool {
		_, err := s.Authenticate(key)
		return err == nil
	})
}

// admit registers c as store user p: its role's permissions, its
// tenant's account, and its name, under which revocation finds the
// connection. Every way of authenticating a store user ends here. still
// reports whether the credential still opens p; reason is the refusal's.
func (a *Authenticator) admit(c server.ClientAuthentication, p identity.Principal, reason string, still func() bool) string {
	perms, err := a.deps.Rules.Permissions(p)
	if err != nil {
		a.deps.Log.Warn("user not admitted", "user", p.User, "err", err)
		return reason
	}
	acc, err := a.deps.Account(p.Tenant, p.User)
	if err != nil {
		a.deps.Log.Warn("user not admitted", "user", p.User, "err", err)
		return reason
	}
	// The server closes the connection when the key expires.
	c.RegisterUser(&server.User{Username: p.User, Permissions: perms, Account: acc, ConnectionDeadline: p.Expires})
	// A removal or rotation may have landed between the lookup and the
	// registration: it closes the connections it finds by user name, so
	// look again now that the name is set (docs/security.md, revocation).
	if !still() {
		return reason
	}
	return ""
}

// verifyNkey checks the signature of the server's nonce, as the NATS
// server does for its configured nkey users.
func verifyNkey(pub, sig string, nonce []byte) bool {
	if len(nonce) == 0 {
		return false
	}
	k, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if raw, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	return k.Verify(nonce, raw) == nil
}

func remoteIP(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
