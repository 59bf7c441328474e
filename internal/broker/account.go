package broker

import (
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
)

// account is the one place that knows which NATS account SemaQ's streams,
// clients and subscriptions live in. Today every client, the node's own
// users included, is in the server's global account ($G): the interest
// the dispatcher checks before handing out work and the directory where
// JetStream keeps a stream's files are both the global account's.
// Identities (docs/security.md) may put tenants in accounts of their own;
// what changes then is this type, not its callers.
type account struct {
	ns      *server.Server
	dataDir string
}

func (s *Server) account() account { return account{ns: s.ns, dataDir: s.cfg.DataDir} }

// name is the NATS account name.
func (a account) name() string { return server.DEFAULT_GLOBAL_ACCOUNT }

// hasInterest reports whether any client of the account subscribes to
// subject: a reply subject nobody listens on has no one to answer.
func (a account) hasInterest(subject string) bool {
	return a.ns.GlobalAccount().SubscriptionInterest(subject)
}

// streamDir is where JetStream keeps the block files of stream.
func (a account) streamDir(stream string) string {
	return filepath.Join(a.dataDir, "jetstream", a.name(), "streams", stream, "msgs")
}
