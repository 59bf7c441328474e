package semaq

import (
	"encoding/json"
	"time"
)

// The audit API: the record of admin changes (docs/security.md, Audit).
// Only the admin role may call it.
const (
	APIAuditList = "$SQ.API.AUDIT.LIST" // AuditListRequest -> AuditListResponse
)

// The operations an audit record names.
const (
	AuditOpStreamCreate    = "stream.create"
	AuditOpStreamDelete    = "stream.delete"
	AuditOpQueueCreate     = "queue.create"
	AuditOpQueueDelete     = "queue.delete"
	AuditOpSchemaRegister  = "schema.register"
	AuditOpSchemaDelete    = "schema.delete"
	AuditOpSchemaConfigSet = "schema.config.set"
	AuditOpSchemaBind      = "schema.bind"
	AuditOpSchemaUnbind    = "schema.unbind"
	AuditOpRouteAdd        = "route.add"
	AuditOpRouteDelete     = "route.delete"
	AuditOpUserAdd         = "user.add"
	AuditOpUserRemove      = "user.rm"
	AuditOpKeyRotate       = "key.rotate"
	AuditOpUserQuota       = "user.quota"
	AuditOpDLQPurge        = "dlq.purge"
	AuditOpDLQReplay       = "dlq.replay"
	// AuditOpSessionDependency: a dependency moved, degrading the
	// sessions that declared another version (docs/sessions.md).
	AuditOpSessionDependency = "session.dependency"
	// Policy rules and plugins (docs/policy.md, docs/plugins.md); a
	// plugin disabled after consecutive failures is recorded by the node
	// that disabled it.
	AuditOpPolicyAdd      = "policy.add"
	AuditOpPolicyDelete   = "policy.delete"
	AuditOpPluginAdd      = "plugin.add"
	AuditOpPluginDelete   = "plugin.delete"
	AuditOpPluginDisabled = "plugin.disabled"
	// The model registry (docs/models.md); a promotion past a failing
	// gate names "forced" in its target.
	AuditOpModelRegister = "model.register"
	AuditOpModelPromote  = "model.promote"
	AuditOpModelRollback = "model.rollback"
	AuditOpModelDrain    = "model.drain"
	AuditOpModelReport   = "model.report"
	// Hardware classes of work queues (docs/queues.md).
	AuditOpClassAdd    = "class.add"
	AuditOpClassDelete = "class.delete"
)

// AuditOps are every operation an audit record may name, in the order
// docs/security.md lists them.
var AuditOps = []string{
	AuditOpStreamCreate, AuditOpStreamDelete, AuditOpQueueCreate, AuditOpQueueDelete,
	AuditOpSchemaRegister, AuditOpSchemaDelete, AuditOpSchemaConfigSet, AuditOpSchemaBind, AuditOpSchemaUnbind,
	AuditOpRouteAdd, AuditOpRouteDelete, AuditOpUserAdd, AuditOpUserRemove, AuditOpKeyRotate,
	AuditOpUserQuota, AuditOpDLQPurge, AuditOpDLQReplay, AuditOpSessionDependency,
	AuditOpPolicyAdd, AuditOpPolicyDelete, AuditOpPluginAdd, AuditOpPluginDelete, AuditOpPluginDisabled,
	AuditOpModelRegister, AuditOpModelPromote, AuditOpModelRollback, AuditOpModelDrain, AuditOpModelReport,
	AuditOpClassAdd, AuditOpClassDelete,
}

// Outcomes of an audited change.
const (
	AuditOK      = "ok"      // the change was made
	AuditRefused = "refused" // the broker refused it; Error says why
)

// AuditPrincipal is who asked for a change: Who is anonymous (auth off),
// node (the node's own users and operators) or user (a store user, with
// its tenant and role).
type AuditPrincipal struct {
	Who    string `json:"who"`
	User   string `json:"user,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Role   string `json:"role,omitempty"`
}

// Name is the principal as `semaq audit ls --user` matches it: the user's
// name, or "node" or "anonymous".
func (p AuditPrincipal) Name() string {
	if p.User != "" {
		return p.User
	}
	return p.Who
}

// AuditRecord is one admin change. Before and After are the JSON of what
// the change is about (a stream's or queue's configuration, a schema
// subject's latest version, a route, a user without key material) as the
// broker read it before and after; null where there was nothing. A
// record never holds a key or a secret: a key rotation names the key IDs
// only.
type AuditRecord struct {
	// Seq is the record's sequence in AuditStream (set when listed).
	Seq       uint64         `json:"seq,omitempty"`
	Time      time.Time      `json:"time"`
	Node      string         `json:"node,omitempty"`
	Principal AuditPrincipal `json:"principal"`
	// Door is "http" for a change the HTTP door made in process (schema
	// registry writes); empty for changes asked on $SQ.API, whichever
	// door sent them.
	Door    string          `json:"door,omitempty"`
	Op      string          `json:"op"`
	Target  string          `json:"target"`
	Outcome string          `json:"outcome"`
	Error   string          `json:"error,omitempty"`
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
}

// AuditListRequest selects audit records: those at or after Since (zero:
// from the first), of principal User (AuditPrincipal.Name) and operation
// Op when set; the newest Limit of them (0 means 100; at most 1000).
type AuditListRequest struct {
	Since time.Time `json:"since,omitzero"`
	User  string    `json:"user,omitempty"`
	Op    string    `json:"op,omitempty"`
	Limit int       `json:"limit,omitempty"`
}

// Bounds of AuditListRequest.Limit.
const (
	AuditListDefault = 100
	AuditListMax     = 1000
)

// AuditListResponse is the records selected, oldest first; More says
// older ones matched beyond Limit.
type AuditListResponse struct {
	Records []AuditRecord `json:"records"`
	More    bool          `json:"more,omitempty"`
}
