package semaq

import "time"

// Key-shared consumer groups (docs/key-shared.md). The members of a group
// share a subject's messages partitioned by a key: every message with the
// same key goes to the same member, in stream order, while members come and
// go. The broker consumes the stream through one durable JetStream consumer
// per group (named after the group), computes each message's key with a CEL
// key expression and forwards it to the member that owns the key, with its
// JetStream ack subject in HdrFilterAck: members ack straight to JetStream.
const (
	APIKeySharedJoin   = "$SQ.API.KEYSHARED.JOIN"     // KeySharedJoinRequest -> KeySharedJoinResponse
	APIKeySharedPingT  = "$SQ.API.KEYSHARED.PING.%s"  // (empty) -> KeySharedMemberStats; keeps member %s in its group
	APIKeySharedLeaveT = "$SQ.API.KEYSHARED.LEAVE.%s" // (empty) -> KeySharedMemberStats; member %s leaves
	APIKeySharedInfo   = "$SQ.API.KEYSHARED.INFO"     // KeySharedInfoRequest -> KeySharedGroupInfo

	// MetadataKeyShared is the consumer metadata key holding a group's CEL
	// key expression: a broker restart resumes the group with it.
	MetadataKeyShared = "semaq.keyshared.key"
)

// ErrMemberGone matches a ping or leave for a member the broker does not
// know.
var ErrMemberGone = &APIError{Code: 404, ErrCode: ErrCodeMemberGone, Description: "key-shared member not found"}

// KeySharedJoinRequest adds a member to a group, creating the group's
// consumer on first use.
type KeySharedJoinRequest struct {
	// Subject is the public subject (wildcards allowed within one stream).
	Subject string `json:"subject"`
	// Group names the group and its durable consumer.
	Group string `json:"group"`
	// Key is the CEL key expression (a string or int: session, tenant,
	// payload.user_id). Empty joins an existing group with its key; a
	// different key than the group's is refused.
	Key string `json:"key,omitempty"`
	// Member names the member (letters, digits, '-', '_'); a stable name
	// keeps the same keys across reconnects. Empty: the broker picks one.
	Member string `json:"member,omitempty"`
	// DeliverSubject is where the member's messages go, as DeliverSubject
	// + "." + the message's subject.
	DeliverSubject string `json:"deliver_subject"`
	// Deliver ("all" or "new"), StartSeq, MaxAckPending (default 1000) and
	// AckWait (default 30s) apply when the group's consumer is created.
	Deliver       string        `json:"deliver,omitempty"`
	StartSeq      uint64        `json:"start_seq,omitempty"`
	MaxAckPending int           `json:"max_ack_pending,omitempty"`
	AckWait       time.Duration `json:"ack_wait,omitempty"`
}

// KeySharedJoinResponse describes the member that joined.
type KeySharedJoinResponse struct {
	// ID is the member's id for ping and leave.
	ID       string `json:"id"`
	Member   string `json:"member"`
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Key      string `json:"key"`
	// Heartbeat is how often the member must ping; a member not pinged for
	// three heartbeats is dropped and its keys move to the others.
	Heartbeat time.Duration `json:"heartbeat"`
}

// KeySharedMemberStats is what a member was sent.
type KeySharedMemberStats struct {
	// Delivered counts messages forwarded to the member (redeliveries
	// again); Members is the group's size.
	Delivered uint64 `json:"delivered"`
	Members   int    `json:"members"`
}

// KeySharedInfoRequest names a group: its consumer's stream and name.
type KeySharedInfoRequest struct {
	Stream string `json:"stream"`
	Group  string `json:"group"`
}

// KeySharedGroupInfo is a running group as the node running its pump
// sees it.
type KeySharedGroupInfo struct {
	Stream  string   `json:"stream"`
	Group   string   `json:"group"`
	Key     string   `json:"key"`
	Members []string `json:"members"`
	// Keys is how many keys have messages in flight or held; Held counts
	// messages waiting for their key's previous owner to finish.
	Keys int `json:"keys"`
	Held int `json:"held"`
	// KeyErrors counts messages whose key failed to evaluate: they take
	// the empty key.
	KeyErrors uint64 `json:"key_errors"`
	// Node is the node running the group's pump; every node of a cluster
	// answers for the group with that node's view.
	Node string `json:"node,omitempty"`
}
