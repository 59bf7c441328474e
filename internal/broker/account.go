package broker

import (
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
)

// account is the one place that knows which NATS account SemaQ's streams,
// clients and subscriptions live in. Today every client, the node's own
// users included, is in the server's global account ($G): the interest
// the dispatcher checks before handing out work and the directory where
// JetStream keeps a stream's files are both the global account's.
// With auth on, store users are clients of accounts of their tenants
// (tenancy.go) that reach this account through imports: the broker, its
// streams and its subscriptions stay here.
type account struct {
	ns      *server.Server
	dataDir string
}

func (s *Server) account() account { return account{ns: s.ns, dataDir: s.cfg.DataDir} }

// name is the NATS account name.
func (a account) name() string { return server.DEFAULT_GLOBAL_ACCOUNT }

// hasInterest reports whether any client of the account subscribes to
// subject, the reply subject of a request with headers h: a reply
// subject nobody listens on has no one to answer.
//
// A reply subject under _R_ is the NATS server's mapping of a user
// account's reply inbox (tenancy.go): the server keeps it while the
// requester listens and drops it when it stops, but shows no interest
// for it. The requester's connection, named in the request's
// Nats-Request-Info, stands for it: on this node, it counts while that
// connection is open; on another, it counts as listened to, and a worker
// gone since is found out by its lease.
func (a account) hasInterest(subject string, h nats.Header) bool {
	if strings.HasPrefix(subject, responsePrefix) {
		ri, ok := api.ParseRequestInfo(h)
		if !ok || ri.Conn == 0 || ri.Server != a.ns.Name() {
			return true
		}
		cz, err := a.ns.Connz(&server.ConnzOptions{CID: ri.Conn})
		return err != nil || len(cz.Conns) > 0
	}
	return a.ns.GlobalAccount().SubscriptionInterest(subject)
}

// responsePrefix starts the NATS server's reply mappings across accounts.
const responsePrefix = "_R_."

// streamDir is where JetStream keeps the block files of stream.
func (a account) streamDir(stream string) string {
	return filepath.Join(a.dataDir, "jetstream", a.name(), "streams", stream, "msgs")
}
