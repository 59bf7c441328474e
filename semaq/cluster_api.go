package semaq

import "time"

// Cluster API subjects.
const (
	// APIClusterStatus describes the cluster: (empty) -> ClusterStatus.
	// One node answers, gathering what every node says of itself.
	APIClusterStatus = "$SQ.API.CLUSTER.STATUS"
	// APIClusterNode is answered by every node, not one of a queue
	// group: (empty) -> ClusterNode.
	APIClusterNode = "$SQ.API.CLUSTER.NODE"
)

// HdrClusterLagging, on the answer to a change (an API reply's header, an
// HTTP response's header), names the nodes of a cluster that had not
// confirmed applying it when it returned, comma-separated: they apply it
// late (docs/cluster.md). Absent when every node did.
const HdrClusterLagging = "SemaQ-Cluster-Lagging"

// ClusterStatus is the state of a SemaQ cluster as one node sees it.
type ClusterStatus struct {
	// Name is the cluster's name; empty for a node that is not clustered.
	Name string `json:"name,omitempty"`
	// AnsweredBy is the node that gathered this status.
	AnsweredBy string `json:"answered_by"`
	// MetaLeader is the node leading JetStream's meta group, which places
	// streams and their replicas; empty while there is none.
	MetaLeader string `json:"meta_leader,omitempty"`
	// Replicas is what SemaQ's own buckets and streams are made with now:
	// 3 once 3 nodes are reached, 1 before.
	Replicas int `json:"replicas"`
	// Nodes are the nodes of the cluster, known from JetStream's meta
	// group and the routes, sorted by name.
	Nodes []ClusterNode `json:"nodes"`
	// Streams are every stream with its leader and replicas.
	Streams []StreamClusterStatus `json:"streams"`
	// StreamsTruncated is set when there were more streams than the
	// status lists (MaxClusterStreams).
	StreamsTruncated bool `json:"streams_truncated,omitempty"`
	// Queues says which node runs each work queue's dispatch.
	Queues []QueueDispatch `json:"queues"`
	// Warnings are what the answering node found wrong with the cluster
	// as a whole, e.g. nodes that disagree on their sync mode.
	Warnings []string `json:"warnings,omitempty"`
}

// MaxClusterStreams bounds the streams one cluster status lists.
const MaxClusterStreams = 1000

// ClusterNode is one node: what it says of itself when it answered, and
// what the meta group says of it.
type ClusterNode struct {
	Name string `json:"name"`
	// Connected is whether the node answered the status request.
	Connected bool `json:"connected"`
	// Version and NATSVersion are the node's SemaQ and nats-server
	// versions; empty when it did not answer.
	Version     string `json:"version,omitempty"`
	NATSVersion string `json:"nats_version,omitempty"`
	// Started is when the node started.
	Started time.Time `json:"started,omitzero"`
	// Sync is the node's JetStream sync mode, "always" or "interval"
	// (docs/durability.md); empty when it did not answer.
	Sync string `json:"sync,omitempty"`
	// JetStreamCurrent is whether the node is current with the meta group.
	JetStreamCurrent bool `json:"jetstream_current"`
	// Meta is the meta leader's view of the node as a peer; nil when the
	// leader did not answer.
	Meta *PeerStatus `json:"meta,omitempty"`
	// Routes are the node's routes to the other nodes.
	Routes []RouteStatus `json:"routes,omitempty"`
	// Dispatching are the work queues whose dispatch runs on the node.
	Dispatching []string `json:"dispatching,omitempty"`
}

// RouteStatus is one route of a node.
type RouteStatus struct {
	// Node is the node at the other end.
	Node string `json:"node"`
	// RTT is the route's last measured round trip.
	RTT string `json:"rtt,omitempty"`
}

// PeerStatus is a replica of a Raft group as its leader sees it.
type PeerStatus struct {
	Name string `json:"name"`
	// Current is whether the replica is caught up and was seen recently.
	Current bool `json:"current"`
	// Offline is whether it has not been seen for a while.
	Offline bool `json:"offline,omitempty"`
	// Active is the time since the leader last heard from it.
	Active time.Duration `json:"active"`
	// Lag is how many operations it is behind.
	Lag uint64 `json:"lag,omitempty"`
}

// StreamCluster is where a stream's replicas are.
type StreamCluster struct {
	// Leader is the node of the stream's leader; empty while there is none.
	Leader string `json:"leader,omitempty"`
	// Followers are the other replicas, as the leader sees them.
	Followers []PeerStatus `json:"followers,omitempty"`
}

// StreamClusterStatus is one stream in a ClusterStatus.
type StreamClusterStatus struct {
	Stream   string `json:"stream"`
	Replicas int    `json:"replicas"`
	// Own is set for SemaQ's own buckets and streams.
	Own bool `json:"own,omitempty"`
	StreamCluster
}

// QueueDispatch says where a work queue is dispatched.
type QueueDispatch struct {
	Queue string `json:"queue"`
	// Node runs the queue's dispatch (its stream's leader); empty when no
	// node that answered runs it (the node did not answer, or the stream
	// is electing a leader).
	Node string `json:"node,omitempty"`
	// StreamLeader is the leader of the queue's stream.
	StreamLeader string `json:"stream_leader,omitempty"`
}
