package reserved

import (
	"fmt"
	"slices"

	"github.com/semaq/semaq/semaq"
)

// The one table of what a node keeps for itself in JetStream and NATS.
// The broker builds from it, and from nothing else: the replicas its own
// streams are raised to (cluster_replicas.go), the clients' permissions
// (permissions.go, and every role's deny list in auth/roles.go starts from
// them), and the broker's inboxes no client may publish or listen on.
// Every subject below is also refused as a reply or deliver subject
// (semaq.CheckReplySubject: the $ and _SQ_ namespaces), which
// resources_test.go checks, row by row.

// Access is what clients may do with one of the node's streams.
type Access int

const (
	// ReadOnly streams are read by clients (stream info, message gets),
	// never changed, and no client makes, pulls from or deletes their
	// consumers: the schema registry, route rules, agents, dead letters.
	ReadOnly Access = iota
	// Hidden streams are not read by any client: the broker answers for
	// them through its API, to admins (identities, audit records).
	Hidden
	// ClientConsumers streams are ReadOnly, but clients make, read and
	// delete consumers of their own on them (token streams, which the
	// roles narrow to a tenant's subjects).
	ClientConsumers
)

func (a Access) String() string {
	switch a {
	case ReadOnly:
		return "read-only"
	case Hidden:
		return "hidden"
	case ClientConsumers:
		return "client-consumers"
	}
	return fmt.Sprintf("Access(%d)", int(a))
}

// Resource is one stream a node keeps for itself, or the stream of one of
// its KV buckets.
type Resource struct {
	// Stream is the stream's name; a bucket's is "KV_" + Bucket.
	Stream string
	// Bucket is the KV bucket the stream holds, "" for a plain stream.
	Bucket string
	// Owner is the subsystem that makes it.
	Owner string
	// Access is what clients may do with it.
	Access Access
	// Replicated streams are raised to the cluster's replicas as it grows
	// to 3 nodes; the others keep what they were made with.
	Replicated bool
	// Writes are subjects the stream captures that only the broker may
	// publish, beyond the storage namespace (StoragePrefix) and $KV.,
	// which no client publishes on at all.
	Writes []string
}

// Bucket is the Resource of a KV bucket.
func Bucket(bucket, owner string, access Access) Resource {
	return Resource{Stream: "KV_" + bucket, Bucket: bucket, Owner: owner, Access: access, Replicated: true}
}

// Builtin are the resources of the broker's own subsystems.
var Builtin = []Resource{
	Bucket(SchemaBucket, "schema-registry", ReadOnly),
	Bucket(RouteBucket, "routes", ReadOnly),
	Bucket(AgentBucket, "agents", ReadOnly),
	// Public keys: clients read them through $SQ.API.PROVENANCE.KEYS.
	Bucket(ProvenanceKeyBucket, "provenance", ReadOnly),
	// Its values hold only hashes of 256-bit secrets, but no client
	// reads them (internal/identity).
	Bucket(UserBucket, "users", Hidden),
	{Stream: semaq.DLQStream, Owner: "dlq", Access: ReadOnly, Replicated: true, Writes: []string{semaq.DLQPrefix + ">"}},
	{Stream: semaq.TokenStream, Owner: "tokens", Access: ClientConsumers, Replicated: true, Writes: []string{semaq.TokenPrefix + ">"}},
	// Admins read it through $SQ.API.AUDIT.LIST; its writes are storage's
	// (AuditPrefix is under StoragePrefix).
	{Stream: AuditStream, Owner: "audit", Access: Hidden, Replicated: true},
	// Clients reach sessions through $SQ.API.SESSION, which checks their
	// tenant; their writes are storage's.
	{Stream: SessionStream, Owner: "sessions", Access: Hidden, Replicated: true},
	{Stream: SessionTimerStream, Owner: "sessions", Access: Hidden, Replicated: true},
	// Admins read rules and plugins through $SQ.API.POLICY and
	// $SQ.API.PLUGIN; the vault is read through RESTORE, which checks the
	// tenant.
	Bucket(PolicyBucket, "policies", Hidden),
	Bucket(VaultBucket, "policies", Hidden),
	// Admins read classes through $SQ.API.CLASS.LIST; slots are the
	// dispatchers' alone.
	Bucket(ClassBucket, "classes", Hidden),
	Bucket(ClassSlotBucket, "classes", Hidden),
	{Stream: "OBJ_" + PluginObjects, Owner: "policies", Access: Hidden, Replicated: true, Writes: []string{"$O." + PluginObjects + ".>"}},
	// The model registry: clients read it through $SQ.API.MODEL; its
	// lifecycle events they consume, and only the broker writes.
	Bucket(ModelBucket, "models", Hidden),
	{Stream: semaq.ModelEventStream, Owner: "models", Access: ClientConsumers, Replicated: true, Writes: []string{semaq.ModelEventPrefix + ">"}},
}

// Table is a node's resources: Builtin and those of the subsystems added
// to the node. It is read-only once made.
type Table struct {
	rs   []Resource
	svcs []Service
}

// NewTable makes the table of Builtin and BuiltinServices with extra and
// services added. It refuses a stream twice, a name JetStream would
// refuse, a bucket whose stream is misnamed, a subject a client could name
// as a reply, and a service outside $SQ.API. or overlapping another.
func NewTable(extra []Resource, services []Service) (*Table, error) {
	t := &Table{rs: slices.Concat(Builtin, extra), svcs: slices.Clone(BuiltinServices)}
	for _, s := range services {
		if err := checkService(t.svcs, s); err != nil {
			return nil, err
		}
		t.svcs = append(t.svcs, s)
	}
	seen := map[string]bool{}
	for _, r := range t.rs {
		if err := semaq.CheckStreamName(r.Stream); err != nil {
			return nil, fmt.Errorf("reserved: %s's stream: %w", r.Owner, err)
		}
		if r.Bucket != "" && r.Stream != "KV_"+r.Bucket {
			return nil, fmt.Errorf("reserved: %s's bucket %s is kept in stream KV_%s, not %s", r.Owner, r.Bucket, r.Bucket, r.Stream)
		}
		if seen[r.Stream] {
			return nil, fmt.Errorf("reserved: stream %s is declared twice", r.Stream)
		}
		seen[r.Stream] = true
		for _, w := range r.Writes {
			if semaq.CheckReplySubject(replyProbe(w)) == nil {
				return nil, fmt.Errorf("reserved: %s's subject %s is outside the reserved namespaces ($, _SQ_): a client could name it as a reply", r.Owner, w)
			}
		}
	}
	return t, nil
}

// replyProbe is a literal subject pattern matches.
func replyProbe(pattern string) string {
	b := []byte(pattern)
	for i, c := range b {
		if c == '*' || c == '>' {
			b[i] = 'x'
		}
	}
	return string(b)
}

// Services are what every user account imports from the node's account.
func (t *Table) Services() []Service { return slices.Clone(t.svcs) }

// Resources are the table's rows.
func (t *Table) Resources() []Resource { return slices.Clone(t.rs) }

// Streams are every stream of the table.
func (t *Table) Streams() []string { return t.streams(func(Resource) bool { return true }) }

// Replicated are the streams raised to the cluster's replicas.
func (t *Table) Replicated() []string {
	return t.streams(func(r Resource) bool { return r.Replicated })
}

// Hidden are the streams no client reads.
func (t *Table) Hidden() []string {
	return t.streams(func(r Resource) bool { return r.Access == Hidden })
}

// ClosedConsumers are the streams whose consumers no client touches.
func (t *Table) ClosedConsumers() []string {
	return t.streams(func(r Resource) bool { return r.Access != ClientConsumers })
}

// Writes are the subjects of the table only the broker publishes on.
func (t *Table) Writes() []string {
	var out []string
	for _, r := range t.rs {
		out = append(out, r.Writes...)
	}
	return out
}

func (t *Table) streams(keep func(Resource) bool) []string {
	var out []string
	for _, r := range t.rs {
		if keep(r) {
			out = append(out, r.Stream)
		}
	}
	return out
}

// Inbox is a reply namespace of the broker's: JetStream and the nodes
// answer it there. No client publishes or listens on it.
type Inbox struct {
	Subject string // a subject pattern
	Owner   string
}

// The broker's inboxes, as prefixes its subsystems draw from.
const (
	JetStreamGuardInbox = "_SQ_JSG"   // the JetStream guard's calls
	IngressAckInbox     = "_SQ_ACK."  // acks the ingress and dispatcher forward
	LatencyInbox        = "_SQ_LAT."  // the ingress's sampled latencies
	PayloadInbox        = "_SQ_DGET." // the dispatcher's payload reads
	SyncInbox           = "_SQ_SYNC." // the nodes' cluster sync
	NodeInbox           = "_SQ_NODE." // the nodes' reports to cluster status
	QueueRemoteInbox    = "_SQ_Q."    // queues served by another node
	TokenBindSubject    = "_SQ_TOK.bind"
	PumpRemoteInbox     = "_SQ_PUMP." // filters and key-shared groups across nodes
	RouteRemoteInbox    = "_SQ_RW."   // route weights shared across nodes
	SessionNoteInbox    = "_SQ_SESS." // "a session changed", to every node
	IngressBatchInbox   = "_SQ_SB."   // a stock batch's messages, to the node of the client's connection
)

// Inboxes are the broker's inboxes.
var Inboxes = []Inbox{
	{JetStreamGuardInbox + ".>", "jetstream-guard"},
	{IngressAckInbox + ">", "ingress"},
	{LatencyInbox + ">", "ingress"},
	{PayloadInbox + ">", "streams"},
	{SyncInbox + ">", "cluster-sync"},
	{NodeInbox + ">", "cluster"},
	{QueueRemoteInbox + ">", "streams"},
	{TokenBindSubject, "tokens"},
	{PumpRemoteInbox + ">", "filters"},
	{RouteRemoteInbox + ">", "routes"},
	{SessionNoteInbox + ">", "sessions"},
	{IngressBatchInbox + ">", "ingress"},
}

// InboxSubjects are the subjects of Inboxes.
func InboxSubjects() []string {
	out := make([]string, len(Inboxes))
	for i, in := range Inboxes {
		out[i] = in.Subject
	}
	return out
}
