package auth

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
)

// The rights of each role, as data. docs/security.md has the same table;
// roles_test.go checks each row against a running server.

// Inbox is the subscribe grant of user name's inbox: the user subscribes
// there and in no one else's.
func Inbox(name string) string { return semaq.UserInboxPrefix + name + ".>" }

// readOnlyAPI is what every non-admin role may ask the broker: who it is
// and where a subject is stored.
var readOnlyAPI = []string{
	semaq.APIInfo,
	semaq.APIStreamLookup,
	fmt.Sprintf(semaq.APIStreamInfoT, "*"),
}

// readerAPI is what a reader may call beyond readOnlyAPI: JetStream's read
// side, filtered subscriptions and key-shared groups. The broker runs
// those with its own rights, so it checks the reader's grants and inbox
// itself (internal/broker/principal.go, authorizeRead).
var readerAPI = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.*",
	"$JS.API.CONSUMER.INFO.*.*",
	"$JS.API.CONSUMER.DELETE.*.*",
	"$JS.API.CONSUMER.MSG.NEXT.*.*",
	"$JS.ACK.>",
	"$JS.FC.>",
	"$SQ.API.FILTER.>",
	"$SQ.API.KEYSHARED.>",
}

// tokenReader is how a client reads the token stream of a request it
// made (docs/tokens.md): an ordered consumer of SQ_TOKENS filtered to one
// request of tenant (a tenant token, or semaq.TokenAnyTenant), the live
// republish, and the status API. Publishers, readers and
// services have it: publishers and readers for their own tenant's
// requests (semaq.TokenNoTenant for a user without one), services for
// every tenant's. The tenant is a literal token of each grant, so a filter
// naming another tenant, or '*' in its place, is refused by the NATS
// server (docs/security.md, Tenant isolation).
func tokenReader(tenant string) (pub, sub []string) {
	pub = []string{
		semaq.APITokenStatus,
		"$JS.API.CONSUMER.CREATE." + semaq.TokenStream + ".*." + semaq.TokenSubjectFilter(tenant, "*"),
		"$JS.API.CONSUMER.MSG.NEXT." + semaq.TokenStream + ".*",
		"$JS.API.CONSUMER.INFO." + semaq.TokenStream + ".*",
		"$JS.API.CONSUMER.DELETE." + semaq.TokenStream + ".*",
		"$JS.FC." + semaq.TokenStream + ".>",
	}
	return pub, []string{semaq.TokenLiveFilter(tenant, "*")}
}

// cancelAPI is how a publisher or service cancels a request: the broker
// checks that the request is the user's own, or its tenant's for a
// service (internal/broker/principal.go, cancelRights).
var cancelAPI = []string{fmt.Sprintf(semaq.APIQueueCancelT, "*")}

// sessionAPI is the session API: the broker checks each call's role and
// tenant itself (internal/broker/sessions: readers read, workers read and
// report, a user with a tenant reaches its own tenant's sessions only).
var sessionAPI = []string{"$SQ.API.SESSION.>"}

// modelAPI is the model registry: every role reads it, the broker lets
// only admins change it and workers and services report figures
// (internal/broker/models). modelEvents are its lifecycle events, which
// every role may follow: models are the node's, not a tenant's.
var (
	modelAPI    = []string{"$SQ.API.MODEL.>"}
	modelEvents = semaq.ModelEventPrefix + ">"
)

// provenanceAPI reads session chains' heads and the nodes' public keys:
// the broker keeps a user with a tenant to its own tenant's chains
// (internal/broker/chains).
var provenanceAPI = []string{"$SQ.API.PROVENANCE.>"}

// restoreAPI is how a client has tokenized values restored: the broker
// restores a user's own tenant's only, and never for a worker, whom
// tokenize keeps them from (internal/broker/policies).
var restoreAPI = []string{semaq.APIPolicyRestore}

// batchAPI is how a publisher or service publishes a batch frame: the
// broker checks each message's subject against the user's grants itself
// (internal/broker/principal.go, authorizePublish).
var batchAPI = []string{semaq.APIPublishBatch}

// agentAPI is how a worker announces itself in the agent registry and
// leaves it (semaq worker does).
var agentAPI = []string{semaq.APIAgentAnnounce, semaq.APIAgentLeave}

// readerConsumers are the consumer creates of a reader, one per subject
// it reads: JetStream's extended create subject names the consumer's
// filter, so the grant is checked by the NATS server. A create without a
// filter in its subject is refused.
func readerConsumers(subjects []string) []string {
	var out []string
	for _, s := range subjects {
		out = append(out, "$JS.API.CONSUMER.CREATE.*.*."+s)
	}
	return out
}

// workerGrants are a worker's publish grants: fetch and info of any queue,
// and answers to jobs ($SQ.QA.<queue>.<seq>.<lease>). The broker checks a
// fetch against the worker's queue globs itself (the NATS server cannot:
// a glob such as INFER_* is a wildcard inside a subject token), so a queue
// created after the worker connected is served without a reconnect; an
// answer needs the job's lease, which only its fetcher received.
var workerGrants = []string{
	fmt.Sprintf(semaq.APIQueueFetchT, "*"),
	fmt.Sprintf(semaq.APIQueueInfoT, "*"),
	semaq.QueueAckPrefix + ">",
	// How far a redelivered job's token stream got (any tenant's, for a
	// worker without one: tokens/api.go).
	semaq.APITokenStatus,
}

// Rules is what permissions are made from.
type Rules struct {
	// Deny is what no one but the internal user and operators may
	// publish: the broker's publicDeny (storage, SemaQ's own streams and
	// consumers, the system account). Every role's deny list starts
	// from it.
	Deny []string
	// Admin is the admin role's permissions: today's public permissions,
	// which reach every management API, the user API included.
	Admin *server.Permissions
	// SubscribeDeny is what no client may subscribe to (job answers,
	// token writes, the broker's inboxes, the system account).
	SubscribeDeny []string
}

// Permissions are the NATS permissions of p.
func (r Rules) Permissions(p identity.Principal) (*server.Permissions, error) {
	if p.Role == semaq.RoleAdmin {
		return r.Admin, nil
	}
	var pub, sub []string
	sub = append(sub, Inbox(p.User))
	switch p.Role {
	case semaq.RolePublisher:
		tpub, tsub := tokenReader(semaq.TokenTenant(p.Tenant))
		pub = slices.Concat(p.Subjects, readOnlyAPI, cancelAPI, tpub, sessionAPI, restoreAPI, batchAPI, provenanceAPI, modelAPI)
		sub = append(sub, tsub...)
		sub = append(sub, semaq.SessionEventFilter(p.Tenant), semaq.PolicyEventFilter(p.Tenant))
	case semaq.RoleReader:
		tpub, tsub := tokenReader(semaq.TokenTenant(p.Tenant))
		pub = slices.Concat(readOnlyAPI, readerAPI, readerConsumers(p.Subjects), tpub, sessionAPI, restoreAPI, provenanceAPI, modelAPI)
		sub = slices.Concat(sub, p.Subjects, tsub, []string{semaq.SessionEventFilter(p.Tenant), semaq.PolicyEventFilter(p.Tenant)})
	case semaq.RoleService:
		tpub, tsub := tokenReader(semaq.TokenAnyTenant)
		pub = slices.Concat(p.Subjects, readOnlyAPI, readerAPI, readerConsumers(p.Subjects), cancelAPI, tpub, sessionAPI, restoreAPI, batchAPI, provenanceAPI, modelAPI)
		sub = slices.Concat(sub, p.Subjects, tsub, []string{semaq.SessionEventFilter("*"), semaq.PolicyEventFilter("*")})
	case semaq.RoleWorker:
		pub = slices.Concat(readOnlyAPI, agentAPI, workerGrants, sessionAPI, modelAPI)
		// Token streams: a writer's records go to $SQ.TW.<writer key>.
		pub = append(pub, semaq.TokenWritePrefix+">")
		// Cancel notices go to $SQ.QC.<worker id>, an ID the SDK draws
		// at random: the grant cannot name it (docs/security.md, gaps).
		sub = append(sub, semaq.QueueCancelPrefix+"*", semaq.SessionEventFilter("*"))
	default:
		return nil, fmt.Errorf("auth: user %s has unknown role %q", p.User, p.Role)
	}
	sub = append(sub, modelEvents)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub, Deny: slices.Clone(r.Deny)},
		Subscribe: &server.SubjectPermission{Allow: sub, Deny: slices.Clone(r.SubscribeDeny)},
	}, nil
}
