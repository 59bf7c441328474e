// Package reserved names what the broker keeps for itself in NATS and
// JetStream: the storage namespace, its queue groups, the consumer and KV
// buckets it owns, and the stream metadata keys it writes. Clients never
// need these names (package semaq has everything a client does); the
// permissions of docs/security.md keep clients out of all of them.
package reserved

const (
	// StoragePrefix is the storage namespace: SemaQ streams capture
	// StoragePrefix+<pattern> and store under <pattern>; only the ingress
	// (and the token relay, below) publish there.
	StoragePrefix = "$SQ.w."
	// TokenStorePrefix is where the token relay stores records; SQ_TOKENS
	// captures it and stores under semaq.TokenPrefix.
	TokenStorePrefix = StoragePrefix + "$tok."
	// AuditStream keeps the audit records, one per admin change
	// (docs/security.md, Audit), under AuditPrefix+<op>. Only the broker
	// writes it (AuditPrefix is in storage) and no client reads it but
	// through $SQ.API.AUDIT.LIST.
	AuditStream = "SQ_AUDIT"
	AuditPrefix = StoragePrefix + "$audit."

	// IngressQueueGroup is the queue group of every node's ingress
	// subscriptions: each published message is taken by one node.
	IngressQueueGroup = "semaq.ingress"
	// APIQueueGroup is the queue group of the $SQ.API handlers.
	APIQueueGroup = "semaq.api"

	// MetadataVersion marks a stream as made by SemaQ.
	MetadataVersion = "semaq.version"
	// MetadataDurability is a stream's durability: fsync or interval.
	MetadataDurability = "semaq.durability"
	// MetadataProvenance and MetadataSessionOrder are a stream's session
	// chain (docs/provenance.md): provenance session or signed, session
	// order strict or strict-seq.
	MetadataProvenance   = "semaq.provenance"
	MetadataSessionOrder = "semaq.session_order"

	// DispatchConsumer is the consumer a work queue's dispatcher reads its
	// stream with.
	DispatchConsumer = "semaq-dispatch"

	// AgentBucket is the KV bucket of agent announcements: key = agent ID,
	// value = the semaq.AgentInfo as JSON.
	AgentBucket = "SQ_AGENTS"
	// RouteBucket is the KV bucket of route rules: key = rule name, value =
	// the semaq.Route as JSON.
	RouteBucket = "SQ_ROUTES"
	// UserBucket is the KV bucket of identities: key = user name, value =
	// the user as JSON, its keys' secrets as SHA-256 hashes only
	// (internal/identity).
	UserBucket = "SQ_USERS"
	// SessionStream keeps sessions, SessionPrefix+<tenant>.<id>.doc and
	// .delta (internal/broker/sessions); SessionTimerStream their pending
	// schedules and firings, under SessionTimerPrefix.
	SessionStream      = "SQ_SESSIONS"
	SessionPrefix      = StoragePrefix + "$sess."
	SessionTimerStream = "SQ_SESSION_TIMERS"
	SessionTimerPrefix = StoragePrefix + "$sesst."
	// PolicyBucket is the KV bucket of policy rules and plugin records:
	// "rule.<name>" and "plugin.<name>", their semaq.PolicyRule and
	// semaq.Plugin as JSON (internal/broker/policies).
	PolicyBucket = "SQ_POLICY"
	// ProvenanceKeyBucket holds the nodes' public signing keys of session
	// chains (docs/provenance.md), by <node>.<key id>.
	ProvenanceKeyBucket = "SQ_PROVENANCE_KEYS"
	// VaultBucket keeps tokenized PII values, sealed with the node's vault
	// key, one key per tenant and scope.
	VaultBucket = "SQ_PII_VAULT"
	// ModelBucket is the model registry: one key per model (its
	// semaq.ModelToken), its semaq.ModelInfo as JSON, changed by
	// compare-and-set (internal/broker/models).
	ModelBucket = "SQ_MODELS"
	// PluginObjects is the object store of plugin modules, one object per
	// SHA-256; its stream is "OBJ_" + PluginObjects.
	PluginObjects = "SQ_PLUGINS"
	// ClassBucket is the KV bucket of work queues' hardware classes: key =
	// class name, value = the semaq.QueueClass as JSON; ClassSlotBucket
	// the held slots of capped classes, <class>.<n>
	// (internal/broker/classes).
	ClassBucket     = "SQ_CLASSES"
	ClassSlotBucket = "SQ_CLASS_SLOTS"
	// SchemaBucket is the schema registry's KV bucket
	// (internal/registry's DefaultBucket).
	SchemaBucket = "SQ_SCHEMAS"
)
