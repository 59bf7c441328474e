package broker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/auth"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
)

// Wiring of identities (internal/identity, internal/broker/auth) into the
// node, with auth on. With auth off none of this runs: the NATS server's
// options are those of permissions.go, unchanged.

// AdminKeyFile is the file, in the data directory, where a node started
// with auth on and no admin writes the key of the admin it creates.
const AdminKeyFile = "admin.key"

// newAuthenticator is the NATS server's authenticator with auth on: node
// users and operators as permissions.go configures them without auth,
// store users by role.
func (s *Server) newAuthenticator() *auth.Authenticator {
	nodeUsers := map[string]*server.Permissions{
		s.users.internal.pub: nil,
		s.users.egress.pub:   egressPermissions(),
		s.users.front.pub:    publicPermissions(s.resources),
	}
	for _, pub := range s.operators {
		nodeUsers[pub] = nil // all rights: see WithOperator
	}
	pub := publicPermissions(s.resources)
	return auth.New(auth.Deps{
		NodeUsers: nodeUsers,
		Rules:     auth.Rules{Deny: publicDeny(s.resources), Admin: pub, SubscribeDeny: pub.Subscribe.Deny},
		Account:   s.userAccount,
		Failed:    s.metrics.AuthFailure,
		Log:       s.log.With("component", "auth"),
	})
}

// userAccount is the NATS account of tenant's users, ready for user
// (tenancy.go).
func (s *Server) userAccount(tenant, user string) (*server.Account, error) {
	if s.tenancy == nil {
		return nil, fmt.Errorf("broker: no user accounts before the server runs")
	}
	return s.tenancy.account(s.ns, tenant, user)
}

// openUsers opens the identity store and hands it to the
// authenticator. With no admin in the store it creates one and writes its
// key to AdminKeyFile; the log names the file, never the key.
//
// With auth off it serves only answers that users need it.
func openUsers(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	if !s.cfg.Auth {
		return subsystem.WithHandlers(subsystem.None, s.userHandlers()), nil
	}
	st, err := identity.Open(ctx, s.js, s.ownReplicas())
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	g := s.gate.Child("users")
	closeStore := subsystem.Func(func(ctx context.Context) error {
		gerr := g.Close(ctx)
		return errors.Join(gerr, st.Close(ctx))
	})
	s.identities = st
	st.ReserveNkeys(s.authn.IsNodeNkey)
	path := filepath.Join(s.cfg.DataDir, AdminKeyFile)
	created, err := st.Bootstrap(ctx, path)
	if err != nil {
		_ = closeStore.Close(ctx)
		return nil, fmt.Errorf("broker: %w", err)
	}
	if created {
		s.log.Warn("auth: created user admin; its key is in the file named here, shown nowhere else: "+
			"keep it, then delete the file", "file", path)
	}
	// Every tenant's account before any user connects (ensureTenants).
	if err := s.tenancy.ensureTenants(s.ns, st.Tenants()); err != nil {
		_ = closeStore.Close(ctx)
		return nil, err
	}
	s.rememberTenants(st.Tenants())
	s.authn.SetStore(st)
	g.Go("revoker", func(ctx context.Context) { s.closeRevoked(ctx, st) })
	// Users the other nodes disconnect may come back here.
	s.resubscribeLate(ctx, st.Tenants())
	return subsystem.WithHandlers(closeStore, s.userHandlers()), nil
}

// revokingHere marks name as being revoked by this node's user API, whose
// handler closes and counts the user's connections itself; the returned
// func unmarks it.
func (s *Server) revokingHere(name string) func() {
	s.revoking.Store(name, struct{}{})
	return func() { s.revoking.Delete(name) }
}

// closeRevoked closes, on this node, the connections of every user whose
// key a change of the store revoked — a removal or rotation written by
// any node — once this node's snapshot refuses the old key (an expiry is
// the NATS server's connection deadline, auth/auth.go): the
// node that answered `semaq user rm` closes its own at once; this is how
// every other node of a cluster follows. It runs until the store stops.
func (s *Server) closeRevoked(ctx context.Context, st *identity.Store) {
	// A user's credentials: its key IDs, and its nkey and certificate
	// subject (prefixed, so no key ID equals them). nkeys are the users'
	// nkeys in the snapshot keys last read.
	var nkeys map[string]string
	keys := func() map[string]map[string]bool {
		out := map[string]map[string]bool{}
		nkeys = map[string]string{}
		for _, u := range st.List() {
			out[u.Name] = map[string]bool{}
			for _, k := range u.Keys {
				out[u.Name][k.ID] = true
			}
			if u.Nkey != "" {
				out[u.Name]["nkey:"+u.Nkey] = true
				nkeys[u.Name] = u.Nkey
			}
			if u.CertSubject != "" {
				out[u.Name]["cert:"+u.CertSubject] = true
			}
		}
		return out
	}
	changed := st.Changed()
	prev := keys()
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
		changed = st.Changed()
		tenants := st.Tenants()
		if err := s.tenancy.ensureTenants(s.ns, tenants); err != nil {
			s.log.Warn("auth: making the accounts of new tenants", "err", err)
		}
		s.rememberTenants(tenants)
		prevNkeys := nkeys
		cur := keys()
		for name, ids := range prev {
			if _, here := s.revoking.Load(name); here {
				continue // the handler closes them and counts them
			}
			for id := range ids {
				if !cur[name][id] {
					if n := s.closeUserConns(name, prevNkeys[name]); n > 0 {
						s.log.Info("auth: closed the connections of a revoked key", "user", name, "key_id", id, "closed_connections", n)
					}
					break
				}
			}
		}
		prev = cur
	}
}

// userHandlers serve $SQ.API.USER.* with auth on. Only the admin role's
// permissions reach these subjects. With auth off they answer that users
// need it, rather than leave `semaq user` wondering whether this is a
// SemaQ broker.
func (s *Server) userHandlers() api.Handlers {
	if s.identities == nil {
		off := func(m *nats.Msg) {
			api.ReplyErr(s.log, m, semaq.NewAPIError(semaq.ErrBadRequest, "users: this broker runs without auth; start it with --auth (auth: true)"))
		}
		return api.Handlers{semaq.APIUserAdd: off, semaq.APIUserList: off, fmt.Sprintf(semaq.APIUserInfoT, "*"): off,
			semaq.APIUserRemove: off, semaq.APIUserRotate: off, semaq.APIUserQuota: off}
	}
	st := s.identities
	return api.Handlers{
		semaq.APIUserAdd: api.Op(s.log, "user add", func(ctx context.Context, r *semaq.UserAddRequest) (out any, err error) {
			defer s.audit(ctx, semaq.AuditOpUserAdd, r.Name)(&out, &err)
			u, k, err := st.Add(ctx, *r)
			if err != nil {
				return nil, err
			}
			s.syncUsers(ctx)
			s.log.Info("auth: user added", "user", u.Name, "role", u.Role, "key_id", k.ID)
			return semaq.UserAddResponse{User: u.Info(), Key: k.String()}, nil
		}, nil),
		semaq.APIUserList: api.Op(s.log, "user list", func(context.Context, *struct{}) (any, error) {
			resp := semaq.UserListResponse{Users: []semaq.UserInfo{}}
			for _, u := range st.List() {
				resp.Users = append(resp.Users, u.Info())
			}
			return resp, nil
		}, nil),
		fmt.Sprintf(semaq.APIUserInfoT, "*"): api.NamedOp(s.log, "user info", func(_ context.Context, name string, _ *struct{}) (any, error) {
			u, err := st.Get(name)
			if err != nil {
				return nil, err
			}
			return u.Info(), nil
		}, nil),
		semaq.APIUserRemove: api.Op(s.log, "user rm", func(ctx context.Context, r *semaq.UserRemoveRequest) (out any, err error) {
			defer s.audit(ctx, semaq.AuditOpUserRemove, r.Name)(&out, &err)
			defer s.revokingHere(r.Name)()
			var nkey string // the server lists nkey connections by their nkey
			if u, err := st.Get(r.Name); err == nil {
				nkey = u.Nkey
			}
			if err := st.Remove(ctx, r.Name); err != nil {
				return nil, err
			}
			n := s.closeUserConns(r.Name, nkey)
			s.syncUsers(ctx)
			s.log.Info("auth: user removed", "user", r.Name, "closed_connections", n)
			return semaq.UserRemoveResponse{Success: true, Closed: n}, nil
		}, nil),
		semaq.APIUserQuota: s.userQuotaHandler(st),
		semaq.APIUserRotate: api.Op(s.log, "key rotate", func(ctx context.Context, r *semaq.UserRotateRequest) (out any, err error) {
			defer s.audit(ctx, semaq.AuditOpKeyRotate, r.Name)(&out, &err)
			defer s.revokingHere(r.Name)()
			u, k, err := st.Rotate(ctx, r.Name, r.ExpiresIn)
			if err != nil {
				return nil, err
			}
			n := s.closeUserConns(r.Name, u.Nkey)
			s.syncUsers(ctx)
			s.log.Info("auth: key rotated", "user", u.Name, "key_id", k.ID, "closed_connections", n)
			return semaq.UserAddResponse{User: u.Info(), Key: k.String()}, nil
		}, nil),
	}
}

// closeUserConns closes the open connections of user name: those the
// authenticator registered under that name, and, given the user's nkey,
// those made with it (the NATS server lists a connection made with an
// nkey by the nkey). The store's snapshot no longer admits the user's old
// credentials when this runs, and the authenticator looks again after
// registering a name, so a connection racing the revocation is either
// found here or refused there.
func (s *Server) closeUserConns(name, nkey string) int {
	n := 0
	for _, id := range []string{name, nkey} {
		if id == "" {
			continue
		}
		cz, err := s.ns.Connz(&server.ConnzOptions{User: id, State: server.ConnOpen, Username: true, Limit: 1 << 20})
		if err != nil {
			s.log.Warn("auth: listing the connections of a revoked user", "user", name, "err", err)
			continue
		}
		for _, c := range cz.Conns {
			if c.AuthorizedUser != id {
				continue
			}
			if err := s.ns.DisconnectClientByID(c.Cid); err == nil {
				n++
			}
		}
	}
	return n
}

// syncUsers returns once every node this one reaches authenticates as the
// identity store now says (and has the accounts of its tenants), so a
// user added through this node connects to any node, and a revoked key
// opens none, when the write returns (clustersync).
func (s *Server) syncUsers(ctx context.Context) {
	if !s.cfg.Clustered() {
		return
	}
	rev, err := s.identities.Revision(ctx)
	if err != nil {
		s.log.Warn("cluster: the identity store's revision, to wait for the other nodes", "err", err)
		return
	}
	s.sync.Sync(ctx, clustersync.Request{Users: rev})
}
