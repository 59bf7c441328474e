package broker

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Tenant accounts (docs/security.md, Principals). With auth on, every
// store user is a client of a NATS account of its tenant, never of the
// node's own account, where the broker, its streams and the node users
// live. A tenant account reaches the node's account through service
// imports with sharing on, so every message and request a user sends
// arrives at the broker with the NATS server's Nats-Request-Info: the
// account and user that sent it, which the client cannot forge
// (principal.go). What the node's account sends users reaches their
// accounts through stream imports of exactly the subjects it sends them
// on (userDeliveries and each user's inbox), filtered by each user's
// subscribe permissions.
//
// Not one stream import of everything: the NATS server does not hand a
// message that reached the node's account through a service import on
// to stream imports, but only on the node it arrived at. Carried over a
// route to another node, it is an ordinary message of the node's
// account there, and an import of everything would deliver one tenant's
// publish on orders.x to another tenant's subscriber of orders.> on that
// node. No user can publish on the imported subjects (stream subjects
// start with neither '$' nor '_').
//
// The imports are exactly the broker's surface, so none overlaps another
// (an overlap would deliver a message twice):
//
//   - the JetStream API a role may use, the management API ($SQ.API),
//     job answers and token writes: fixed, below;
//   - the public subjects of every stream: added as streams appear.
//
// Core messages between users cross accounts only through the broker: a
// user's publish on a subject no stream captures reaches the subscribers
// of its own tenant, not other tenants'.

const (
	// tenantAccountPrefix starts the account name of a tenant's users.
	tenantAccountPrefix = "SQ_T_"
	// noTenantAccount is the account of users without a tenant (admins,
	// workers, services acting for every tenant).
	noTenantAccount = "SQ_USERS"
	// publicAccount is the account of the public user with auth off
	// (every client without credentials): like a tenant's, it reaches
	// the node's account only through the imports below, so nothing it
	// sends, and no reply to it, lands in the node's account on a subject
	// it chose.
	publicAccount = "SQ_PUBLIC"
	// publicInbox is what the public account imports of the node's
	// account besides userDeliveries: deliveries to the inboxes of
	// clients without credentials (filtered subscriptions, key-shared
	// members, push consumers: jsguard/ keeps their deliver subjects
	// there).
	publicInbox = "_INBOX.>"
	// publicEvents are JetStream's advisories, which every client without
	// credentials saw before it had an account of its own (`nats event`,
	// dead-letter tooling). Tenants do not see them: they name every
	// tenant's streams and consumers.
	publicEvents = "$JS.EVENT.>"
)

// userDeliveries are the subjects the broker sends every user's account
// on, besides the users' inboxes: token republishes and cancel notices.
var userDeliveries = []string{semaq.TokenLivePrefix + ">", semaq.QueueCancelPrefix + ">"}

// tenancy keeps the user accounts of a node: the tenants' with auth on,
// the public account without. Safe for concurrent use.
type tenancy struct {
	node     *server.Account    // the node's account: the broker and its streams
	services []reserved.Service // what every user account imports from it

	mu       sync.Mutex
	accounts map[string]*server.Account // user accounts by name
	streams  []string                   // public stream subjects imported, in order
	// inboxes are the inboxes imported, by account and user: one per
	// user that connected since the node started, so at most the users
	// the store has held (an import cannot be taken back; a removed
	// user's stays, and no other user may subscribe to it).
	inboxes map[[2]string]bool
	// known are the user accounts registered before the NATS server
	// started (tenancy_known.go).
	known []string
	// remembered are the tenants last written for the next start
	// (tenancy_known.go); nil before the first write. Under rememberMu,
	// not mu: a user's connection does not wait for the file.
	rememberMu sync.Mutex
	remembered []string
}

// newTenancy exports the broker's surface from the node's account: the
// services of its table of resources (reserved.Table.Services).
func newTenancy(ns *server.Server, services []reserved.Service) (*tenancy, error) {
	t := &tenancy{node: ns.GlobalAccount(), accounts: make(map[string]*server.Account), inboxes: make(map[[2]string]bool), services: services}
	for _, b := range services {
		rt := server.Singleton
		if b.Streamed {
			rt = server.Streamed
		}
		if err := t.node.AddServiceExportWithResponse(b.Target(), rt, nil); err != nil {
			return nil, fmt.Errorf("broker: exporting %s to user accounts: %w", b.Target(), err)
		}
	}
	if err := t.node.AddStreamExport(">", nil); err != nil { // the imports pick their subjects
		return nil, fmt.Errorf("broker: exporting the node's subjects to user accounts: %w", err)
	}
	return t, nil
}

// accountName is the NATS account of tenant's users.
func accountName(tenant string) string {
	if tenant == "" {
		return noTenantAccount
	}
	return tenantAccountPrefix + tenant
}

// isUserAccount reports whether account is one of the store users'.
func (t *tenancy) isUserAccount(account string) bool {
	return account == noTenantAccount || strings.HasPrefix(account, tenantAccountPrefix)
}

// tenantOf is the tenant of a user account ("" for noTenantAccount).
func (t *tenancy) tenantOf(account string) string {
	if account == noTenantAccount {
		return ""
	}
	return strings.TrimPrefix(account, tenantAccountPrefix)
}

// account is the account of tenant's users, made with its imports on
// first use, with user's inbox imported.
func (t *tenancy) account(ns *server.Server, tenant, user string) (*server.Account, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	acc, err := t.tenantAccount(ns, tenant)
	if err != nil {
		return nil, err
	}
	key := [2]string{acc.Name, user}
	if t.inboxes[key] {
		return acc, nil
	}
	inbox := semaq.UserInboxPrefix + user + ".>"
	if err := acc.AddStreamImport(t.node, inbox, ""); err != nil {
		return nil, fmt.Errorf("broker: account %s: importing the inbox of %s: %w", acc.Name, user, err)
	}
	t.inboxes[key] = true
	return acc, nil
}

// tenantAccount is the account of tenant's users. t.mu is held.
func (t *tenancy) tenantAccount(ns *server.Server, tenant string) (*server.Account, error) {
	name := accountName(tenant)
	if acc, ok := t.accounts[name]; ok {
		return acc, nil
	}
	// Registered bare before the server started, when the node knew the
	// tenant then (tenancy_known.go).
	acc, err := ns.LookupAccount(name)
	if err != nil {
		if acc, err = ns.RegisterAccount(name); err != nil {
			return nil, fmt.Errorf("broker: account of tenant %q: %w", tenant, err)
		}
	}
	if err := t.importSurface(acc); err != nil {
		return nil, err
	}
	t.accounts[name] = acc
	return acc, nil
}

// public gives the public account, registered with the server's options
// (natsOptions), its imports: the broker's surface, the inboxes of
// clients without credentials, and JetStream's advisories.
func (t *tenancy) public(ns *server.Server) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	acc, err := ns.LookupAccount(publicAccount)
	if err != nil {
		return fmt.Errorf("broker: the public account: %w", err)
	}
	if err := t.importSurface(acc); err != nil {
		return err
	}
	for _, subj := range []string{publicInbox, publicEvents} {
		if err := acc.AddStreamImport(t.node, subj, ""); err != nil {
			return fmt.Errorf("broker: account %s: importing %s: %w", acc.Name, subj, err)
		}
	}
	t.accounts[publicAccount] = acc
	return nil
}

// importSurface imports the broker's surface into a user account: its
// services, the public subjects of the streams so far, and the
// deliveries every user may receive. t.mu is held.
func (t *tenancy) importSurface(acc *server.Account) error {
	for _, b := range t.services {
		if err := t.importService(acc, b.Subject, b.Target()); err != nil {
			return err
		}
	}
	for _, subj := range t.streams {
		if err := t.importService(acc, subj, subj); err != nil {
			return err
		}
	}
	// Session events: a tenant's account imports its own tenant's only,
	// so no permission has to keep another tenant's out.
	events := []string{semaq.SessionEventFilter("*"), semaq.PolicyEventFilter("*")}
	if strings.HasPrefix(acc.Name, tenantAccountPrefix) {
		events = []string{semaq.SessionEventFilter(t.tenantOf(acc.Name)), semaq.PolicyEventFilter(t.tenantOf(acc.Name))}
	}
	// Model lifecycle events are the node's, every account's to follow.
	events = append(events, semaq.ModelEventPrefix+">")
	for _, subj := range slices.Concat(userDeliveries, events) {
		if err := acc.AddStreamImport(t.node, subj, ""); err != nil {
			return fmt.Errorf("broker: account %s: importing %s: %w", acc.Name, subj, err)
		}
	}
	return nil
}

func (t *tenancy) importService(acc *server.Account, subject, to string) error {
	if err := acc.AddServiceImport(t.node, subject, to); err != nil {
		return fmt.Errorf("broker: account %s: importing %s: %w", acc.Name, subject, err)
	}
	if err := acc.SetServiceImportSharing(t.node, to, true); err != nil {
		return fmt.Errorf("broker: account %s: sharing %s: %w", acc.Name, subject, err)
	}
	return nil
}

// addStreamSubjects routes publishes on a stream's public subjects from
// every user account to the ingress. A subject already routed, or inside
// one routed, needs nothing (checkStreamSubjects says which would fail).
func (t *tenancy) addStreamSubjects(subjects []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	add, err := t.newSubjects(subjects)
	if err != nil {
		return err
	}
	for _, s := range add {
		if err := t.node.AddServiceExportWithResponse(s, server.Singleton, nil); err != nil {
			return fmt.Errorf("broker: exporting %s to user accounts: %w", s, err)
		}
		for _, acc := range t.accounts {
			if err := t.importService(acc, s, s); err != nil {
				return err
			}
		}
		t.streams = append(t.streams, s)
	}
	return nil
}

// checkStreamSubjects says whether a stream on subjects can be routed.
func (t *tenancy) checkStreamSubjects(subjects []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.newSubjects(subjects)
	return err
}

// newSubjects are the subjects of subjects not routed yet. The NATS
// server cannot take an import back, so the subjects of a deleted stream
// stay routed (to no one) until the node restarts; a subject overlapping
// one of them without being inside it is refused, since a message
// matching both would reach the ingress twice. t.mu is held.
func (t *tenancy) newSubjects(subjects []string) ([]string, error) {
	var add []string
	for _, s := range subjects {
		covered := false
		for _, have := range t.streams {
			if !server.SubjectsCollide(s, have) {
				continue
			}
			if !server.SubjectMatchesFilter(s, have) {
				return nil, fmt.Errorf("subjects %s overlap %s, which this node still routes for user accounts after the stream that had it was deleted; restart the node to use them", s, have)
			}
			covered = true
		}
		if !covered && !slices.Contains(add, s) {
			add = append(add, s)
		}
	}
	return add, nil
}

// ensureTenants makes the accounts of tenants, and of users without a
// tenant, ahead of their users' first connection to this node. The NATS
// server drops a route's interest in an account it does not know yet and
// never asks for it again, so a node must know a tenant's account before
// a user of that tenant subscribes on another node, or that user misses
// the tenant's core messages published here (docs/cluster.md, auth).
func (t *tenancy) ensureTenants(ns *server.Server, tenants []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tenant := range append([]string{""}, tenants...) {
		if _, err := t.tenantAccount(ns, tenant); err != nil {
			return err
		}
	}
	return nil
}

// ensureAccounts gives the user accounts of names (accountName), made
// before the NATS server started, their imports.
func (t *tenancy) ensureAccounts(ns *server.Server, names []string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, name := range names {
		if !t.isUserAccount(name) {
			return fmt.Errorf("broker: %s is not a user account", name)
		}
		if _, err := t.tenantAccount(ns, t.tenantOf(name)); err != nil {
			return err
		}
	}
	return nil
}

// remember hands tenants to write unless they are what it last wrote.
func (t *tenancy) remember(tenants []string, write func([]string) error) error {
	t.rememberMu.Lock()
	defer t.rememberMu.Unlock()
	if t.remembered != nil && slices.Equal(t.remembered, tenants) {
		return nil
	}
	if err := write(tenants); err != nil {
		return err
	}
	t.remembered = append([]string{}, tenants...)
	return nil
}
