package broker

import (
	"strings"
)

// Tenant accounts (docs/security.md, Principals). With auth on, every
// store user is a client of a NATS account of its tenant, never of the
// node's own account, where the broker, its streams and node users live.
// The tenant account reaches the broker through service imports with
// sharing on, so every message and request a user sends arrives at the
// broker with the NATS server's Nats-Request-Info: the account and user
// that sent it, which the client cannot forge.

const (
	// tenantAccountPrefix starts the account name of a tenant's users.
	tenantAccountPrefix = "SQ_T_"
	// noTenantAccount is the account of users without a tenant (admins,
	// workers, services acting for every tenant).
	noTenantAccount = "SQ_USERS"
)

// tenancy keeps the tenant accounts of a node with auth on.
type tenancy struct{}

// accountName is the NATS account of tenant's users.
func accountName(tenant string) string {
	if tenant == "" {
		return noTenantAccount
	}
	return tenantAccountPrefix + tenant
}

// isUserAccount reports whether account is one of the store users'.
func (t *tenancy) isUserAccount(account string) bool {
	return account == noTenantAccount || strings.HasPrefix(account, tenantAccountPrefix)
}

// tenantOf is the tenant of a user account ("" for noTenantAccount).
func (t *tenancy) tenantOf(account string) string {
	return strings.TrimPrefix(account, tenantAccountPrefix)
}
