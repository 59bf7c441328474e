package semaq

import "slices"

// Error codes: the ErrCode of an *APIError, the err_code of an error reply,
// the number a program tests (errors.Is against a sentinel does it for Go).
// Every code is declared here and only here, one const block per range, and
// described once in errorCodes; docs/errors.md is their user-facing page.
// errcodes_test.go keeps the three in step: no number used twice, every
// block within the range its comment declares, every code in the table and
// in the docs.
//
// Codes 10000-10999 are JetStream's and pass through unchanged, so SemaQ's
// own start at 20000, ten numbers per subsystem. The schema registry's keep
// Confluent Schema Registry's numbers.

// 20000-20029: envelope, streams and the ingress (docs/subjects.md).
const (
	ErrCodeBadEnvelope    uint16 = 20001
	ErrCodeHeaderTooLarge uint16 = 20002
	ErrCodeBadRequest     uint16 = 20003
	ErrCodeNoStream       uint16 = 20004
	ErrCodeStreamNotFound uint16 = 20005
	ErrCodeStreamExists   uint16 = 20006
	ErrCodeBadStream      uint16 = 20007
	ErrCodeTooLarge       uint16 = 20008
	ErrCodeUnavailable    uint16 = 20009
	ErrCodeInternal       uint16 = 20010
	ErrCodeSchema         uint16 = 20011
	ErrCodeSchemaNotFound uint16 = 20012
	ErrCodeCommit         uint16 = 20013
)

// 20030-20039: dead letters (docs/dlq.md).
const (
	ErrCodeDeadLetterNotFound uint16 = 20030
	ErrCodePayloadLost        uint16 = 20031
)

// 20040-20049: route rules (docs/routing.md).
const (
	ErrCodeRouteNotFound uint16 = 20040
	ErrCodeRouteExists   uint16 = 20041
	ErrCodeBadRoute      uint16 = 20042
)

// 20050-20059: the agent registry (docs/agents.md).
const (
	ErrCodeAgentNotFound uint16 = 20050
	ErrCodeBadAgent      uint16 = 20051
)

// 20060-20069: work queues (docs/queues.md).
const (
	ErrCodeQueueNotFound   uint16 = 20060
	ErrCodeOverloaded      uint16 = 20061
	ErrCodeRequestNotFound uint16 = 20062
	ErrCodeLeaseLost       uint16 = 20063
	ErrCodeBadQueue        uint16 = 20064
	ErrCodeClassNotFound   uint16 = 20065
	ErrCodeClassExists     uint16 = 20066
	ErrCodeBadClass        uint16 = 20067
)

// 20070-20079: token streams (docs/tokens.md).
const (
	ErrCodeTokenWriter         uint16 = 20070
	ErrCodeTokenRecord         uint16 = 20071
	ErrCodeTokenLimit          uint16 = 20072
	ErrCodeTokenBusy           uint16 = 20073
	ErrCodeTokenStreamNotFound uint16 = 20074
)

// 20090-20099: filtered subscriptions (docs/filtering.md).
const (
	ErrCodeFilterGone uint16 = 20090
)

// 20100-20109: key-shared consumer groups (docs/key-shared.md).
const (
	ErrCodeMemberGone uint16 = 20100
)

// 20110-20119: users and permissions (docs/security.md).
const (
	ErrCodeUserNotFound uint16 = 20110
	ErrCodeUserExists   uint16 = 20111
	ErrCodeForbidden    uint16 = 20112
)

// 20120-20129: policy steps (docs/policy.md).
const (
	ErrCodePolicy         uint16 = 20120
	ErrCodePolicyNotFound uint16 = 20121
	ErrCodeBadPolicy      uint16 = 20122
	ErrCodePolicyExists   uint16 = 20123
	ErrCodePIIBlocked     uint16 = 20124
	ErrCodeVaultNotFound  uint16 = 20125
)

// 20130-20139: sessions (docs/sessions.md).
const (
	ErrCodeSessionNotFound     uint16 = 20130
	ErrCodeSessionConflict     uint16 = 20131
	ErrCodeBadSession          uint16 = 20132
	ErrCodeSessionRevisionGone uint16 = 20133
)

// 20140-20149: plugins (docs/plugins.md).
const (
	ErrCodePluginNotFound uint16 = 20140
	ErrCodeBadPlugin      uint16 = 20141
	ErrCodePluginExists   uint16 = 20142
	ErrCodePluginFailed   uint16 = 20143
)

// 20150-20159: batch publishing (docs/batches.md).
const (
	ErrCodeBadBatch       uint16 = 20150
	ErrCodeBatchRefused   uint16 = 20151
	ErrCodeBatchLimit     uint16 = 20152
	ErrCodeBatchAbandoned uint16 = 20153
)

// 20160-20169: session chains: provenance and strict session order
// (docs/provenance.md, docs/streams.md).
const (
	ErrCodeSessionOrder  uint16 = 20160
	ErrCodeChainNotFound uint16 = 20161
	ErrCodeChainBusy     uint16 = 20162
)

// 20170-20179: the model registry (docs/models.md).
const (
	ErrCodeModelNotFound uint16 = 20170
	ErrCodeBadModel      uint16 = 20171
	ErrCodeModelConflict uint16 = 20172
	ErrCodeModelGate     uint16 = 20173
	ErrCodeModelDraining uint16 = 20174
)

// Schema registry (docs/schema-registry.md): Confluent Schema Registry's
// codes, with their HTTP status (the first three digits) as APIError.Code,
// so the NATS API, the REST API and Confluent's documentation agree. 4049x
// and 4229x are SemaQ's own.
//
// ErrCodeSchemaNotFound (20012) is not one of them: it is the ingress's
// refusal of a message whose schema id or bound subject does not exist.
// Registry reads of a missing id fail with ErrCodeSchemaIDNotFound (40403).
const (
	ErrCodeSchemaSubjectNotFound       uint16 = 40401
	ErrCodeSchemaVersionNotFound       uint16 = 40402
	ErrCodeSchemaIDNotFound            uint16 = 40403
	ErrCodeSchemaSubjectSoftDeleted    uint16 = 40404
	ErrCodeSchemaSubjectNotSoftDeleted uint16 = 40405
	ErrCodeSchemaVersionSoftDeleted    uint16 = 40406
	ErrCodeSchemaVersionNotSoftDeleted uint16 = 40407
	ErrCodeSchemaCompatNotConfigured   uint16 = 40408
	ErrCodeSchemaBindingNotFound       uint16 = 40491
	ErrCodeSchemaIncompatible          uint16 = 409
	ErrCodeSchemaUnprocessable         uint16 = 422
	ErrCodeSchemaInvalid               uint16 = 42201
	ErrCodeSchemaInvalidVersion        uint16 = 42202
	ErrCodeSchemaInvalidCompatibility  uint16 = 42203
	ErrCodeSchemaReferenceExists       uint16 = 42206
	ErrCodeSchemaInvalidSubject        uint16 = 42208
	ErrCodeSchemaInvalidBinding        uint16 = 42291
	ErrCodeSchemaLimitExceeded         uint16 = 42292
	ErrCodeSchemaStore                 uint16 = 50001
	ErrCodeSchemaTimeout               uint16 = 50002
)

// ErrorCode describes one error code.
type ErrorCode struct {
	Code    uint16 // the err_code
	Name    string // the constant that names it, e.g. "ErrCodeQueueNotFound"
	Status  int    // the HTTP-like APIError.Code it comes with, e.g. 404
	Meaning string // one line, for people
}

// ErrorCodes returns every error code of SemaQ's APIs in ascending order:
// SemaQ's own and the schema registry's, not JetStream's pass-through codes.
// The slice is a copy.
func ErrorCodes() []ErrorCode { return slices.Clone(errorCodes) }

var errorCodes = []ErrorCode{
	// The schema registry's two three-digit codes sort first.
	{ErrCodeSchemaIncompatible, "ErrCodeSchemaIncompatible", 409, "the schema breaks the subject's compatibility level; the description lists every reason"},
	{ErrCodeSchemaUnprocessable, "ErrCodeSchemaUnprocessable", 422, "the request body is not what the registry takes"},

	{ErrCodeBadEnvelope, "ErrCodeBadEnvelope", 400, "invalid envelope: a header is malformed, reserved, repeated or over its limit; the description names it"},
	{ErrCodeHeaderTooLarge, "ErrCodeHeaderTooLarge", 400, "reserved, not sent: a header block over its limit is ErrCodeBadEnvelope"},
	{ErrCodeBadRequest, "ErrCodeBadRequest", 400, "bad request: a malformed body, subject or name, or a field out of bounds"},
	{ErrCodeNoStream, "ErrCodeNoStream", 404, "no stream captures the subject"},
	{ErrCodeStreamNotFound, "ErrCodeStreamNotFound", 404, "stream not found"},
	{ErrCodeStreamExists, "ErrCodeStreamExists", 400, "stream already exists"},
	{ErrCodeBadStream, "ErrCodeBadStream", 400, "invalid stream configuration"},
	{ErrCodeTooLarge, "ErrCodeTooLarge", 413, "message, body or reply over its size limit"},
	{ErrCodeUnavailable, "ErrCodeUnavailable", 503, "the broker cannot serve the request now: JetStream or a subsystem is not running or did not answer"},
	{ErrCodeInternal, "ErrCodeInternal", 500, "the HTTP door could not stream or encode its answer"},
	{ErrCodeSchema, "ErrCodeSchema", 400, "the payload does not match the schema bound to its subject"},
	{ErrCodeSchemaNotFound, "ErrCodeSchemaNotFound", 404, "the message's schema id or bound registry subject does not exist"},
	{ErrCodeCommit, "ErrCodeCommit", 503, "the group commit failed: the message may be stored but is not durable"},

	{ErrCodeDeadLetterNotFound, "ErrCodeDeadLetterNotFound", 404, "dead letter not found: never was, replayed or purged"},
	{ErrCodePayloadLost, "ErrCodePayloadLost", 409, "the dead letter has no payload to replay"},

	{ErrCodeRouteNotFound, "ErrCodeRouteNotFound", 404, "route not found"},
	{ErrCodeRouteExists, "ErrCodeRouteExists", 409, "route already exists"},
	{ErrCodeBadRoute, "ErrCodeBadRoute", 400, "invalid route: an expression that does not compile, a target no stream captures, bad weights"},

	{ErrCodeAgentNotFound, "ErrCodeAgentNotFound", 404, "agent not found"},
	{ErrCodeBadAgent, "ErrCodeBadAgent", 400, "invalid agent announcement"},

	{ErrCodeQueueNotFound, "ErrCodeQueueNotFound", 404, "queue not found"},
	{ErrCodeOverloaded, "ErrCodeOverloaded", 429, "refused by a queue's admission control or a tenant's or user's quota; retry_after_ms says when to retry"},
	{ErrCodeRequestNotFound, "ErrCodeRequestNotFound", 404, "the queue does not hold the request: never there, done, expired or cancelled"},
	{ErrCodeLeaseLost, "ErrCodeLeaseLost", 409, "the worker no longer holds the job: ack wait passed, cancelled or answered already"},
	{ErrCodeBadQueue, "ErrCodeBadQueue", 400, "invalid queue configuration"},
	{ErrCodeClassNotFound, "ErrCodeClassNotFound", 404, "no class of that name"},
	{ErrCodeClassExists, "ErrCodeClassExists", 400, "a class of that name exists; replace it explicitly"},
	{ErrCodeBadClass, "ErrCodeBadClass", 400, "invalid class: a bad name, label or max concurrency; the description names it"},

	{ErrCodeTokenWriter, "ErrCodeTokenWriter", 403, "not this token stream's writer: no key, a wrong key, or a stream tied to no writer"},
	{ErrCodeTokenRecord, "ErrCodeTokenRecord", 400, "invalid token record: malformed, out of order or after the end"},
	{ErrCodeTokenLimit, "ErrCodeTokenLimit", 413, "a token stream or record limit is reached; the description names it"},
	{ErrCodeTokenBusy, "ErrCodeTokenBusy", 503, "the relay tracks its limit of token streams"},
	{ErrCodeTokenStreamNotFound, "ErrCodeTokenStreamNotFound", 404, "the broker never issued the token stream, or removed it after its retention"},

	{ErrCodeFilterGone, "ErrCodeFilterGone", 404, "the broker runs no filter with the id: it ended, or the broker restarted"},

	{ErrCodeMemberGone, "ErrCodeMemberGone", 404, "no key-shared member with the id: it left, was dropped for missing heartbeats, or the broker restarted"},

	{ErrCodeUserNotFound, "ErrCodeUserNotFound", 404, "user not found"},
	{ErrCodeUserExists, "ErrCodeUserExists", 400, "user already exists"},
	{ErrCodeForbidden, "ErrCodeForbidden", 403, "not permitted for the sender: another tenant, or a subject or queue outside the user's grants"},

	{ErrCodePolicy, "ErrCodePolicy", 400, "a policy step refused the message; the description says which and why"},
	{ErrCodePolicyNotFound, "ErrCodePolicyNotFound", 404, "no policy rule of that name"},
	{ErrCodeBadPolicy, "ErrCodeBadPolicy", 400, "invalid policy rule: a bad name, type, action, path, pattern or word list; the description names it"},
	{ErrCodePolicyExists, "ErrCodePolicyExists", 400, "a policy rule of that name exists; replace it explicitly"},
	{ErrCodePIIBlocked, "ErrCodePIIBlocked", 400, "the message holds personal data a rule blocks; the description names the type and where, never the value"},
	{ErrCodeVaultNotFound, "ErrCodeVaultNotFound", 404, "no tokenized values are kept for the scope in the caller's tenant: expired, or never there"},

	{ErrCodeSessionNotFound, "ErrCodeSessionNotFound", 404, "no such session in the caller's tenant: never made, deleted or expired"},
	{ErrCodeSessionConflict, "ErrCodeSessionConflict", 409, "the session is not at the revision the writer named"},
	{ErrCodeBadSession, "ErrCodeBadSession", 400, "invalid session request: a bad ID, data that is not a JSON object, a setting out of bounds, a document too large"},
	{ErrCodeSessionRevisionGone, "ErrCodeSessionRevisionGone", 410, "the deltas after that revision are no longer kept"},

	{ErrCodePluginNotFound, "ErrCodePluginNotFound", 404, "no plugin of that name"},
	{ErrCodeBadPlugin, "ErrCodeBadPlugin", 400, "invalid plugin: a bad module, ABI, stage, signature, limit or upload; the description names it"},
	{ErrCodePluginExists, "ErrCodePluginExists", 400, "a plugin of that name exists; replace it explicitly"},
	{ErrCodePluginFailed, "ErrCodePluginFailed", 503, "a plugin failed on the message (trap, time or memory limit, bad output, disabled) and its failure policy rejects"},

	{ErrCodeBadBatch, "ErrCodeBadBatch", 400, "invalid batch: a malformed frame, a sequence gap, or an atomic batch over two streams; the description names the message"},
	{ErrCodeBatchRefused, "ErrCodeBatchRefused", 400, "an atomic batch one of whose messages was refused; nothing of it was stored, the description names the message and why"},
	{ErrCodeBatchLimit, "ErrCodeBatchLimit", 413, "a batch over a bound: messages, bytes, or batches open"},
	{ErrCodeBatchAbandoned, "ErrCodeBatchAbandoned", 408, "a stock client's atomic batch saw no message for 10 s and was dropped; nothing of it was stored"},

	{ErrCodeSessionOrder, "ErrCodeSessionOrder", 409, "a message of a strictly ordered session whose AI-Timestamp (or AI-Seq) is not after the session's last accepted one; the description names both"},
	{ErrCodeChainNotFound, "ErrCodeChainNotFound", 404, "no provenance chain for that stream, tenant and session"},
	{ErrCodeChainBusy, "ErrCodeChainBusy", 503, "a session's chain has too many messages waiting for storage, or lost its race too often; retry"},

	{ErrCodeModelNotFound, "ErrCodeModelNotFound", 404, "no such model, or no such version of it, in the registry"},
	{ErrCodeBadModel, "ErrCodeBadModel", 400, "invalid model request: a bad name, version, label, figure or share"},
	{ErrCodeModelConflict, "ErrCodeModelConflict", 409, "the version's state does not allow the change (promoting a retired version, draining the active one, rolling back with nothing to return to)"},
	{ErrCodeModelGate, "ErrCodeModelGate", 409, "the promotion gate refused the version; the description gives the figures"},
	{ErrCodeModelDraining, "ErrCodeModelDraining", 409, "a request named a draining or retired version of a registered model"},

	{ErrCodeSchemaSubjectNotFound, "ErrCodeSchemaSubjectNotFound", 404, "schema subject not found"},
	{ErrCodeSchemaVersionNotFound, "ErrCodeSchemaVersionNotFound", 404, "schema version not found"},
	{ErrCodeSchemaIDNotFound, "ErrCodeSchemaIDNotFound", 404, "schema id not found"},
	{ErrCodeSchemaSubjectSoftDeleted, "ErrCodeSchemaSubjectSoftDeleted", 404, "schema subject already soft-deleted"},
	{ErrCodeSchemaSubjectNotSoftDeleted, "ErrCodeSchemaSubjectNotSoftDeleted", 404, "permanent delete of a subject that was not soft-deleted first"},
	{ErrCodeSchemaVersionSoftDeleted, "ErrCodeSchemaVersionSoftDeleted", 404, "schema version already soft-deleted"},
	{ErrCodeSchemaVersionNotSoftDeleted, "ErrCodeSchemaVersionNotSoftDeleted", 404, "permanent delete of a version that was not soft-deleted first"},
	{ErrCodeSchemaCompatNotConfigured, "ErrCodeSchemaCompatNotConfigured", 404, "the subject has no compatibility level of its own"},
	{ErrCodeSchemaBindingNotFound, "ErrCodeSchemaBindingNotFound", 404, "no binding has the pattern, or none matches the subject"},
	{ErrCodeSchemaInvalid, "ErrCodeSchemaInvalid", 422, "invalid schema: does not parse, unknown type, over a schema limit, or a reference to a missing version"},
	{ErrCodeSchemaInvalidVersion, "ErrCodeSchemaInvalidVersion", 422, "invalid schema version"},
	{ErrCodeSchemaInvalidCompatibility, "ErrCodeSchemaInvalidCompatibility", 422, "invalid compatibility level"},
	{ErrCodeSchemaReferenceExists, "ErrCodeSchemaReferenceExists", 422, "a live schema references the version being deleted"},
	{ErrCodeSchemaInvalidSubject, "ErrCodeSchemaInvalidSubject", 422, "invalid schema subject"},
	{ErrCodeSchemaInvalidBinding, "ErrCodeSchemaInvalidBinding", 422, "invalid binding pattern"},
	{ErrCodeSchemaLimitExceeded, "ErrCodeSchemaLimitExceeded", 422, "a registry bound is reached: subjects, versions of a subject, schemas or total bytes"},
	{ErrCodeSchemaStore, "ErrCodeSchemaStore", 500, "the registry's storage failed, or the registry is closed"},
	{ErrCodeSchemaTimeout, "ErrCodeSchemaTimeout", 500, "the registry timed out"},
}
