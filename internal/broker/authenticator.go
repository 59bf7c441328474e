package broker

import (
	"fmt"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker/auth"
)

// Wiring of identities (internal/identity, internal/broker/auth) into the
// NATS server, with auth on. With auth off none of this runs: the NATS
// server's options are those of permissions.go, unchanged. The identity
// store, the user API and revocation are internal/broker/users.

// AdminKeyFile is the file, in the data directory, where a node started
// with auth on and no admin writes the key of the admin it creates.
const AdminKeyFile = "admin.key"

// newAuthenticator is the NATS server's authenticator with auth on: node
// users and operators as permissions.go configures them without auth,
// store users by role.
func (s *Server) newAuthenticator() *auth.Authenticator {
	nodeUsers := map[string]*server.Permissions{
		s.users.internal.pub: nil,
		s.users.egress.pub:   egressPermissions(),
		s.users.front.pub:    publicPermissions(s.resources),
	}
	for _, pub := range s.operators {
		nodeUsers[pub] = nil // all rights: see WithOperator
	}
	pub := publicPermissions(s.resources)
	return auth.New(auth.Deps{
		NodeUsers: nodeUsers,
		Rules:     auth.Rules{Deny: publicDeny(s.resources), Admin: pub, SubscribeDeny: pub.Subscribe.Deny},
		Account:   s.userAccount,
		Failed:    s.metrics.AuthFailure,
		Log:       s.log.With("component", "auth"),
	})
}

// userAccount is the NATS account of tenant's users, ready for user
// (tenancy.go).
func (s *Server) userAccount(tenant, user string) (*server.Account, error) {
	if s.tenancy == nil {
		return nil, fmt.Errorf("broker: no user accounts before the server runs")
	}
	return s.tenancy.account(s.ns, tenant, user)
}
