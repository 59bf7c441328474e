package semaq

import (
	"time"
)

// ErrPolicy matches a message a policy step of the ingress refused (package
// policy, docs/policy.md).
var ErrPolicy = &APIError{Code: 400, ErrCode: ErrCodePolicy, Description: "refused by policy"}

// Policy rules and plugins (docs/policy.md, docs/plugins.md). Rules are
// stored replicated, in a KV bucket only the broker writes, and every node
// applies a change before the API answers it: a rule added is in force on
// the next publish, on every node, from the same revision.
//
// A rule acts where it is attached:
//   - at the ingress (Subjects, or Streams naming SemaQ streams): before the
//     schema check, on the payload as published; the schema validates the
//     redacted payload;
//   - on token streams (Streams holding PolicyStreamTokens): on the text
//     workers write, as the relay stores it, an entity split across records
//     still caught.
const (
	APIPolicyAdd    = "$SQ.API.POLICY.ADD"    // PolicyAddRequest -> PolicyInfo
	APIPolicyList   = "$SQ.API.POLICY.LIST"   // (empty) -> PolicyListResponse
	APIPolicyGet    = "$SQ.API.POLICY.GET"    // PolicyNameRequest -> PolicyInfo
	APIPolicyDelete = "$SQ.API.POLICY.DELETE" // PolicyNameRequest -> PolicyDeleteResponse
	APIPolicyTest   = "$SQ.API.POLICY.TEST"   // PolicyTestRequest -> PolicyTestResponse
	// APIPolicyRestore restores the placeholders a tokenize action put in
	// text, for the tenant whose message they came from only.
	APIPolicyRestore = "$SQ.API.POLICY.RESTORE" // PolicyRestoreRequest -> PolicyRestoreResponse

	APIPluginAdd    = "$SQ.API.PLUGIN.ADD"    // PluginAddRequest -> PluginUpload (then chunks, then commit)
	APIPluginList   = "$SQ.API.PLUGIN.LIST"   // (empty) -> PluginListResponse
	APIPluginDelete = "$SQ.API.PLUGIN.DELETE" // PluginNameRequest -> PolicyDeleteResponse
	// APIPluginChunkT receives an upload's chunks in order: the upload id,
	// then the chunk number from 0 (a PluginChunkResponse each); an empty
	// chunk commits the upload (-> PluginInfo).
	APIPluginChunkT = "$SQ.API.PLUGIN.CHUNK.%s.%d"
)

// PolicyStreamTokens in a rule's Streams attaches it to token streams.
const PolicyStreamTokens = "tokens"

// PII entity types a rule may redact (docs/policy.md names the rule of each).
const (
	PIIEmail  = "email"
	PIIPhone  = "phone"
	PIICNID   = "cn-id"
	PIICard   = "card"
	PIIIBAN   = "iban"
	PIISSN    = "ssn"
	PIIIP     = "ip"
	PIISecret = "secret"
)

// PII actions.
const (
	PIIMask     = "mask"     // [EMAIL]
	PIIHash     = "hash"     // [EMAIL:3f9a0c41d2b7], keyed and stable
	PIITokenize = "tokenize" // <EMAIL_1>, restorable by the sender's tenant
	PIIBlock    = "block"    // the message is refused, naming the type and path
)

// Content policy actions, on a match of Words or Patterns.
const (
	ContentMask = "mask" // the match is replaced by ***
	ContentStop = "stop" // the stream ends with finish_reason content_filter
	ContentFlag = "flag" // an event; the text goes on
)

// FinishContentFilter is the finish reason of a token stream a content
// policy stopped, as the OpenAI API names it.
const FinishContentFilter = "content_filter"

// HdrPIIScope names the vault scope of a message whose values were
// tokenized: "s.<session>", "r.<Nats-Msg-Id>" or "m.<id>" when the message
// had neither. The broker stamps it; APIPolicyRestore takes it.
const HdrPIIScope = "AI-PII-Scope"

// PolicyEventPrefix starts the subjects of policy events: what a rule
// flagged or stopped, a plugin disabled. PolicyEventPrefix + "<tenant>.<name>",
// the tenant token (TokenTenant) of the message's tenant and the rule's or
// plugin's name. A tenant's users see their own tenant's only.
const PolicyEventPrefix = "$SQ.POLICY.EVENT."

// PolicyEventSubject is the subject of an event of rule or plugin name on
// a message of tenant.
func PolicyEventSubject(tenant, name string) string {
	return PolicyEventPrefix + TokenTenant(tenant) + "." + name
}

// PolicyEventFilter matches the policy events of tenant ("*" for every
// tenant's).
func PolicyEventFilter(tenant string) string {
	if tenant == "*" {
		return PolicyEventPrefix + ">"
	}
	return PolicyEventPrefix + TokenTenant(tenant) + ".*"
}

// Bounds on rules.
const (
	MaxPolicies        = 256
	MaxPolicyWords     = 10_000
	MaxPolicyWordBytes = 64 << 10
	MaxPolicyPatterns  = 64
	MaxPolicyPaths     = 32
)

// PolicyRule is one stored policy rule.
type PolicyRule struct {
	// Name: 1 to 64 letters, digits, '-' and '_', starting with a letter.
	Name string `json:"name"`
	// Tenant limits the rule to the messages and token streams of one
	// tenant; empty applies it to every one.
	Tenant string `json:"tenant,omitempty"`
	// Subjects are ingress subject patterns the rule applies to.
	Subjects []string `json:"subjects,omitempty"`
	// Streams are SemaQ streams whose ingress the rule applies to, and
	// PolicyStreamTokens for token streams.
	Streams []string `json:"streams,omitempty"`

	// Redact lists PII types to find (PII* constants); Action is what is
	// done to each (PIIMask by default) and Actions overrides it per type.
	Redact  []string          `json:"redact,omitempty"`
	Action  string            `json:"action,omitempty"`
	Actions map[string]string `json:"actions,omitempty"`
	// Paths select the JSON string values searched (dotted, '*' for any
	// key or index: messages.*.content); none searches every one.
	Paths []string `json:"paths,omitempty"`

	// Words (whole words and phrases, any case) and Patterns (RE2) are the
	// content policy; OnMatch is what a match does (Content* constants,
	// ContentMask by default).
	Words    []string `json:"words,omitempty"`
	Patterns []string `json:"patterns,omitempty"`
	OnMatch  string   `json:"on_match,omitempty"`
}

// PolicyAddRequest adds a rule; one of the same name is refused unless
// Replace is set.
type PolicyAddRequest struct {
	PolicyRule
	Replace bool `json:"replace,omitempty"`
}

// PolicyInfo is a stored rule and this node's counters for it.
type PolicyInfo struct {
	PolicyRule
	Created  time.Time   `json:"created"`
	Revision uint64      `json:"revision"`
	Stats    PolicyStats `json:"stats"`
	// Error says why this node cannot run the rule, if it cannot.
	Error string `json:"error,omitempty"`
}

// PolicyStats are one node's counters of a rule since it loaded it.
type PolicyStats struct {
	Messages uint64            `json:"messages"`          // messages and token records looked at
	Found    map[string]uint64 `json:"found,omitempty"`   // entities and content matches, by type or "content"
	Blocked  uint64            `json:"blocked,omitempty"` // messages refused
	Stopped  uint64            `json:"stopped,omitempty"` // token streams stopped
	Flagged  uint64            `json:"flagged,omitempty"`
}

// PolicyListResponse lists the rules, by name.
type PolicyListResponse struct {
	Policies []PolicyInfo `json:"policies"`
}

// PolicyNameRequest names one rule.
type PolicyNameRequest struct {
	Name string `json:"name"`
}

// PolicyDeleteResponse answers a delete.
type PolicyDeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// PolicyTestRequest runs a rule (stored, by Name, or given, by Rule) on a
// sample without storing anything or writing the vault.
type PolicyTestRequest struct {
	Name string      `json:"name,omitempty"`
	Rule *PolicyRule `json:"rule,omitempty"`
	// Data is the sample: JSON or text.
	Data []byte `json:"data"`
}

// PolicyTestResponse is what the rule would do.
type PolicyTestResponse struct {
	// Data is the sample as the rule leaves it (tokenize shows the
	// placeholders it would assign).
	Data     []byte          `json:"data"`
	Findings []PolicyFinding `json:"findings"`
	// Blocked and Stopped say the message would be refused, or the token
	// stream stopped, and why.
	Blocked string `json:"blocked,omitempty"`
	Stopped string `json:"stopped,omitempty"`
}

// PolicyFinding is one entity or content match: its type, where (a JSON
// Pointer, empty for text) and what was done. The value is never reported.
type PolicyFinding struct {
	Type   string `json:"type"`
	Path   string `json:"path,omitempty"`
	Action string `json:"action"`
	Rule   string `json:"rule,omitempty"`
}

// PolicyRestoreRequest asks for text with the placeholders of a scope
// (HdrPIIScope) restored. Tenant is for admins and services (others act
// for their own tenant).
type PolicyRestoreRequest struct {
	Scope  string `json:"scope"`
	Tenant string `json:"tenant,omitempty"`
	Text   string `json:"text,omitempty"`
	// Values asks for the scope's whole mapping instead.
	Values bool `json:"values,omitempty"`
}

// PolicyRestoreResponse is the restored text, or the mapping.
type PolicyRestoreResponse struct {
	Text     string            `json:"text,omitempty"`
	Values   map[string]string `json:"values,omitempty"`
	Restored int               `json:"restored"`
}

// PolicyEvent is published on PolicyEventSubjectT.
type PolicyEvent struct {
	Kind    string    `json:"kind"` // "flag", "stop", "plugin_disabled"
	Policy  string    `json:"policy,omitempty"`
	Plugin  string    `json:"plugin,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Subject string    `json:"subject,omitempty"`
	Request string    `json:"request,omitempty"` // a token stream's request id
	Reason  string    `json:"reason,omitempty"`
	Node    string    `json:"node"`
	Time    time.Time `json:"time"`
}

// Plugin stages.
const (
	PluginStageIngress = "ingress"
	PluginStageFilter  = "filter"
	PluginStageTokens  = "tokens"
)

// Plugin failure policies: what a failed call does to its message.
const (
	PluginFailReject = "reject"
	PluginFailPass   = "pass"
)

// Bounds on plugins.
const (
	MaxPluginBytes    = 32 << 20
	MaxPluginChunk    = 512 << 10
	MaxPlugins        = 32
	DefaultPluginTime = 100 * time.Millisecond
	MaxPluginTime     = 5 * time.Second
)

// Plugin is one stored WASM plugin.
type Plugin struct {
	Name     string   `json:"name"`
	Stage    string   `json:"stage"`
	Subjects []string `json:"subjects,omitempty"`
	Tenant   string   `json:"tenant,omitempty"`
	// Timeout bounds one call (DefaultPluginTime when zero).
	Timeout time.Duration `json:"timeout,omitempty"`
	// MemoryMiB bounds an instance's memory (the node's default when zero).
	MemoryMiB int `json:"memory_mib,omitempty"`
	// OnFailure: PluginFailReject (default) or PluginFailPass.
	OnFailure string `json:"on_failure,omitempty"`
	// FailAfter consecutive failures disable the plugin (default 10).
	FailAfter int `json:"fail_after,omitempty"`
	// SHA256 of the module, hex; Size its bytes.
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Signature is an ed25519 signature of the SHA-256, base64, checked
	// against the node's plugin keys when it has some.
	Signature string `json:"signature,omitempty"`
}

// PluginAddRequest starts an upload of Size bytes with digest SHA256.
type PluginAddRequest struct {
	Plugin
	Replace bool `json:"replace,omitempty"`
}

// PluginUpload answers PluginAddRequest: where to send the chunks.
type PluginUpload struct {
	Upload string `json:"upload"`
	Chunk  int    `json:"chunk"` // the largest chunk accepted
}

// PluginChunkResponse acknowledges a chunk.
type PluginChunkResponse struct {
	Received int64 `json:"received"`
}

// PluginInfo is a stored plugin as one node runs it.
type PluginInfo struct {
	Plugin
	Created  time.Time   `json:"created"`
	Revision uint64      `json:"revision"`
	Stats    PluginStats `json:"stats"`
	Error    string      `json:"error,omitempty"` // why this node cannot run it
}

// PluginStats are one node's counters of a plugin version.
type PluginStats struct {
	Calls          uint64 `json:"calls"`
	Failures       uint64 `json:"failures"`
	Disabled       bool   `json:"disabled,omitempty"`
	DisabledReason string `json:"disabled_reason,omitempty"`
	LastError      string `json:"last_error,omitempty"`
}

// PluginListResponse lists the plugins, by name.
type PluginListResponse struct {
	Plugins []PluginInfo `json:"plugins"`
}

// PluginNameRequest names one plugin.
type PluginNameRequest struct {
	Name string `json:"name"`
}

// Policy and plugin errors.
var (
	ErrPolicyNotFound = &APIError{Code: 404, ErrCode: ErrCodePolicyNotFound, Description: "policy not found"}
	ErrBadPolicy      = &APIError{Code: 400, ErrCode: ErrCodeBadPolicy, Description: "invalid policy"}
	ErrPolicyExists   = &APIError{Code: 400, ErrCode: ErrCodePolicyExists, Description: "policy already exists"}
	// ErrPIIBlocked: a block action found an entity; the description
	// names its type and where, never its value.
	ErrPIIBlocked = &APIError{Code: 400, ErrCode: ErrCodePIIBlocked, Description: "refused: the message holds personal data a policy blocks"}
	// ErrVaultNotFound: no tokenized values are kept for the scope in the
	// caller's tenant (expired, or never there).
	ErrVaultNotFound = &APIError{Code: 404, ErrCode: ErrCodeVaultNotFound, Description: "no tokenized values for the scope"}

	ErrPluginNotFound = &APIError{Code: 404, ErrCode: ErrCodePluginNotFound, Description: "plugin not found"}
	ErrBadPlugin      = &APIError{Code: 400, ErrCode: ErrCodeBadPlugin, Description: "invalid plugin"}
	ErrPluginExists   = &APIError{Code: 400, ErrCode: ErrCodePluginExists, Description: "plugin already exists"}
	// ErrPluginFailed: a plugin failed on the message (trap, time or
	// memory limit, bad output, disabled) and its failure policy rejects.
	ErrPluginFailed = &APIError{Code: 503, ErrCode: ErrCodePluginFailed, Description: "a plugin failed on the message"}
)
