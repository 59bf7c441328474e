package broker

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/semaq"
)

// Tenant accounts (docs/security.md, Principals). With auth on, every
// store user is a client of a NATS account of its tenant, never of the
// node's own account, where the broker, its streams and the node users
// live. A tenant account reaches the node's account through service
// imports with sharing on, so every message and request a user sends
// arrives at the broker with the NATS server's Nats-Request-Info: the
// account and user that sent it, which the client cannot forge
// (principal.go). What the node's account publishes reaches tenant
// accounts through one stream import of everything, filtered by each
// user's subscribe permissions.
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
)

// brokerService is one fixed service import of every user account.
type brokerService struct {
	subject string
	// streamed: the broker answers one request with several messages
	// (a pull's batch, a fetch's jobs), so the reply mapping lives until
	// the NATS server's response threshold (2 minutes), not until the
	// first answer.
	streamed bool
}

// brokerServices are the fixed imports. None is a prefix of another.
var brokerServices = []brokerService{
	// JetStream: what the roles' permissions may reach (auth/roles.go).
	{subject: "$JS.API.INFO"},
	{subject: "$JS.API.STREAM.>"},
	{subject: "$JS.API.CONSUMER.CREATE.>"},
	{subject: "$JS.API.CONSUMER.DURABLE.>"},
	{subject: "$JS.API.CONSUMER.NAMES.>"},
	{subject: "$JS.API.CONSUMER.LIST.>"},
	{subject: "$JS.API.CONSUMER.INFO.>"},
	{subject: "$JS.API.CONSUMER.DELETE.>"},
	{subject: "$JS.API.CONSUMER.MSG.NEXT.>", streamed: true},
	{subject: "$JS.API.DIRECT.GET.>", streamed: true},
	{subject: "$JS.ACK.>"},
	{subject: "$JS.FC.>"},
	// The management API, family by family: a queue fetch is answered
	// with several messages.
	{subject: semaq.APIInfo},
	{subject: "$SQ.API.STREAM.>"},
	{subject: "$SQ.API.SCHEMA.>"},
	{subject: "$SQ.API.DLQ.>"},
	{subject: "$SQ.API.ROUTE.>"},
	{subject: "$SQ.API.FILTER.>"},
	{subject: "$SQ.API.KEYSHARED.>"},
	{subject: "$SQ.API.AGENT.>"},
	{subject: "$SQ.API.TOKENS.>"},
	{subject: "$SQ.API.USER.>"},
	{subject: "$SQ.API.AUDIT.>"},
	{subject: "$SQ.API.CLUSTER.>"},
	{subject: "$SQ.API.QUEUE.CREATE.>"},
	{subject: "$SQ.API.QUEUE.INFO.>"},
	{subject: "$SQ.API.QUEUE.DELETE.>"},
	{subject: semaq.APIQueueList},
	{subject: "$SQ.API.QUEUE.CANCEL.>"},
	{subject: "$SQ.API.QUEUE.FETCH.>", streamed: true},
	// Job answers and token writes.
	{subject: semaq.QueueAckPrefix + ">"},
	{subject: semaq.TokenWritePrefix + ">"},
}

// tenancy keeps the user accounts of a node with auth on. Safe for
// concurrent use.
type tenancy struct {
	node *server.Account // the node's account: the broker and its streams

	mu       sync.Mutex
	accounts map[string]*server.Account // user accounts by name
	streams  []string                   // public stream subjects imported, in order
}

// newTenancy exports the broker's surface from the node's account.
func newTenancy(ns *server.Server) (*tenancy, error) {
	t := &tenancy{node: ns.GlobalAccount(), accounts: make(map[string]*server.Account)}
	for _, b := range brokerServices {
		rt := server.Singleton
		if b.streamed {
			rt = server.Streamed
		}
		if err := t.node.AddServiceExportWithResponse(b.subject, rt, nil); err != nil {
			return nil, fmt.Errorf("broker: exporting %s to user accounts: %w", b.subject, err)
		}
	}
	if err := t.node.AddStreamExport(">", nil); err != nil {
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
// first use.
func (t *tenancy) account(ns *server.Server, tenant string) (*server.Account, error) {
	name := accountName(tenant)
	t.mu.Lock()
	defer t.mu.Unlock()
	if acc, ok := t.accounts[name]; ok {
		return acc, nil
	}
	acc, err := ns.RegisterAccount(name)
	if err != nil {
		return nil, fmt.Errorf("broker: account of tenant %q: %w", tenant, err)
	}
	for _, b := range brokerServices {
		if err := t.importService(acc, b.subject); err != nil {
			return nil, err
		}
	}
	for _, subj := range t.streams {
		if err := t.importService(acc, subj); err != nil {
			return nil, err
		}
	}
	if err := acc.AddStreamImport(t.node, ">", ""); err != nil {
		return nil, fmt.Errorf("broker: account %s: importing the node's subjects: %w", name, err)
	}
	t.accounts[name] = acc
	return acc, nil
}

func (t *tenancy) importService(acc *server.Account, subject string) error {
	if err := acc.AddServiceImport(t.node, subject, subject); err != nil {
		return fmt.Errorf("broker: account %s: importing %s: %w", acc.Name, subject, err)
	}
	if err := acc.SetServiceImportSharing(t.node, subject, true); err != nil {
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
			if err := t.importService(acc, s); err != nil {
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
