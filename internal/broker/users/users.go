// Package users is a node's user API and the revocation of users' keys,
// with auth on (docs/security.md). It opens the identity store
// (internal/identity), makes the first admin when the store has none,
// hands the store to the NATS door's authenticator, and serves
// $SQ.API.USER.*: add, list, info, remove, key rotation and quotas.
//
// A key the store no longer admits must open no connection anywhere: the
// node that answers a removal or rotation closes the user's connections
// itself and waits for the other nodes of its cluster to read the store
// as it now is (Deps.Sync); every node follows the store's changes
// (closeRevoked) and closes, on its own NATS server, the connections of
// keys written away by any node.
//
// With auth off nothing is opened: the user API answers that users need
// --auth, rather than leave `semaq user` wondering whether this is a
// SemaQ broker.
package users

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/identity"
)

// Deps is what the user API needs of the node. With Auth false only Log
// and Gate are read.
type Deps struct {
	// Auth is the node's --auth. Without it the service opens nothing and
	// its handlers answer that users need it.
	Auth bool
	// Log is the node's logger; the service's lines start with "auth:".
	Log *slog.Logger
	// JS is JetStream on the internal connection, where the identity
	// store keeps its bucket (reserved.UserBucket), with Replicas.
	JS       jetstream.JetStream
	Replicas int
	// AdminKey is the file a node with no admin in its store writes the
	// key of the admin it creates to (broker.AdminKeyFile in the data
	// directory). The log names the file, never the key.
	AdminKey string
	// NATS is the node's NATS server: the connections of a revoked user
	// are listed and closed there.
	NATS *server.Server
	// ReservedNkey reports whether pub is the nkey of one of the node's
	// own NATS users, which no store user may take. Required.
	ReservedNkey func(pub string) bool
	// EnsureTenants makes the NATS accounts of tenants that have none
	// yet; its error names what failed. Called by Open, before any user
	// connects, and after every change of the store. Required.
	EnsureTenants func(tenants []string) error
	// RememberTenants writes tenants down for the node's next start (a
	// cluster's nodes make them before their routes connect); it logs
	// its own errors. Called with EnsureTenants. Required.
	RememberTenants func(tenants []string)
	// Admit hands the store to the NATS door's authenticator: from then
	// on the store's users connect. Called once, by Open, once every
	// tenant has its account. Required.
	Admit func(st *identity.Store)
	// Audit records an admin change (docs/security.md, Audit).
	Audit api.AuditFunc
	// Clustered is true for a node of a cluster: a change waits for the
	// other nodes (Sync) before it is answered.
	Clustered bool
	// Sync returns once every node this one reaches has read the store
	// at revision rev or later, and has its tenants' accounts (the
	// cluster sync), or once it gave up waiting. Called by the add,
	// remove and rotate handlers; required when Clustered.
	Sync func(ctx context.Context, rev uint64)
	// Gate starts the goroutine that follows the store's revocations;
	// Close closes it.
	Gate *subsystem.Gate
}

// Service is the user API of a node. Its methods are safe for concurrent
// use.
type Service struct {
	deps  Deps
	log   *slog.Logger
	store *identity.Store // nil with auth off
	// revoking are the user names the user API revokes now → struct{}.
	revoking sync.Map
}

// Open opens the identity store and hands it to the authenticator
// (Deps.Admit). With no admin in the store it creates one and writes its
// key to Deps.AdminKey; the log names the file, never the key.
//
// With auth off it opens nothing: its handlers only answer that users
// need it.
func Open(ctx context.Context, deps Deps) (*Service, error) {
	s := &Service{deps: deps, log: deps.Log}
	if !deps.Auth {
		return s, nil
	}
	st, err := identity.Open(ctx, deps.JS, deps.Replicas)
	if err != nil {
		_ = deps.Gate.Close(ctx)
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.store = st
	st.ReserveNkeys(deps.ReservedNkey)
	created, err := st.Bootstrap(ctx, deps.AdminKey)
	if err != nil {
		_ = s.Close(ctx)
		return nil, fmt.Errorf("broker: %w", err)
	}
	if created {
		s.log.Warn("auth: created user admin; its key is in the file named here, shown nowhere else: "+
			"keep it, then delete the file", "file", deps.AdminKey)
	}
	// Every tenant's account before any user connects.
	if err := deps.EnsureTenants(st.Tenants()); err != nil {
		_ = s.Close(ctx)
		return nil, err
	}
	deps.RememberTenants(st.Tenants())
	deps.Admit(st)
	deps.Gate.Go("revoker", s.closeRevoked)
	return s, nil
}

// Close stops following the store's revocations, waits for it, and
// closes the store.
func (s *Service) Close(ctx context.Context) error {
	gerr := s.deps.Gate.Close(ctx)
	if s.store == nil {
		return gerr
	}
	return errors.Join(gerr, s.store.Close(ctx))
}

// revokingHere marks name as being revoked by this node's user API, whose
// handler closes and counts the user's connections itself; the returned
// func unmarks it.
func (s *Service) revokingHere(name string) func() {
	s.revoking.Store(name, struct{}{})
	return func() { s.revoking.Delete(name) }
}

// closeRevoked closes, on this node, the connections of every user whose
// key a change of the store revoked — a removal or rotation written by
// any node — once this node's snapshot refuses the old key (an expiry is
// the NATS server's connection deadline, auth/auth.go): the
// node that answered `semaq user rm` closes its own at once; this is how
// every other node of a cluster follows. It runs until ctx is done.
func (s *Service) closeRevoked(ctx context.Context) {
	st := s.store
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
		if err := s.deps.EnsureTenants(tenants); err != nil {
			s.log.Warn("auth: making the accounts of new tenants", "err", err)
		}
		s.deps.RememberTenants(tenants)
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

// closeUserConns closes the open connections of user name: those the
// authenticator registered under that name, and, given the user's nkey,
// those made with it (the NATS server lists a connection made with an
// nkey by the nkey). The store's snapshot no longer admits the user's old
// credentials when this runs, and the authenticator looks again after
// registering a name, so a connection racing the revocation is either
// found here or refused there.
func (s *Service) closeUserConns(name, nkey string) int {
	ns := s.deps.NATS
	n := 0
	for _, id := range []string{name, nkey} {
		if id == "" {
			continue
		}
		cz, err := ns.Connz(&server.ConnzOptions{User: id, State: server.ConnOpen, Username: true, Limit: 1 << 20})
		if err != nil {
			s.log.Warn("auth: listing the connections of a revoked user", "user", name, "err", err)
			continue
		}
		for _, c := range cz.Conns {
			if c.AuthorizedUser != id {
				continue
			}
			if err := ns.DisconnectClientByID(c.Cid); err == nil {
				n++
			}
		}
	}
	return n
}

// syncUsers returns once every node this one reaches authenticates as the
// identity store now says (and has the accounts of its tenants), so a
// user added through this node connects to any node, and a revoked key
// opens none, when the write returns (Deps.Sync).
func (s *Service) syncUsers(ctx context.Context) {
	if !s.deps.Clustered {
		return
	}
	rev, err := s.store.Revision(ctx)
	if err != nil {
		s.log.Warn("cluster: the identity store's revision, to wait for the other nodes", "err", err)
		return
	}
	s.deps.Sync(ctx, rev)
}
