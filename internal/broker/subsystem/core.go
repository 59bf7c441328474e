package subsystem

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/reserved"
)

// Spec declares a subsystem made outside the broker's own list (broker
// WithSubsystem): its name, the resources it keeps in JetStream, and how
// it opens.
type Spec struct {
	// Name names the subsystem in logs, errors and goroutine labels.
	Name string
	// Resources are the streams and buckets it keeps: they join the
	// node's own (reserved.Resources), so clients cannot change them and
	// they are raised to the cluster's replicas when Replicated.
	Resources []reserved.Resource
	// Services are its API subjects (under $SQ.API.): every user account
	// imports them, and the admin role may call them.
	Services []reserved.Service
	// Open makes the subsystem. It is called once, when the node starts,
	// after the built-in subsystems opened and before the API is served;
	// an error stops the start.
	Open func(ctx context.Context, core Core) (Subsystem, error)
}

// Core is what every subsystem may use of the node.
type Core struct {
	// Log names the subsystem as its component.
	Log *slog.Logger
	// JS is JetStream on the internal connection: it may write the
	// node's own streams and buckets.
	JS jetstream.JetStream
	// Conn is the internal connection. It never publishes to a subject a
	// client chose: that is Egress's.
	Conn *nats.Conn
	// Egress sends to subjects clients chose (docs/security.md).
	Egress *nats.Conn
	// Node is the node's name.
	Node string
	// Clustered is true for a node of a cluster.
	Clustered bool
	// Replicas is the replicas the node's own streams get now (1, or 3
	// once the node reaches 3 nodes).
	Replicas func() int
	// Gate starts the subsystem's goroutines; the node closes it after
	// the subsystem's Close, and refuses new ones from its shutdown on.
	Gate *Gate
	// Audit records an admin change (docs/security.md, Audit).
	Audit api.AuditFunc
	// Metrics is the node's Prometheus registry.
	Metrics *metrics.Metrics
}
