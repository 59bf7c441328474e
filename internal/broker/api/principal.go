package api

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// RequestInfoHeader is the header the NATS server puts on every message a
// client of another account sends through a service import with sharing
// on: the sender's account and user, set by the server, never the
// client's (a forged one is replaced). With auth on, every store user
// reaches the broker that way (internal/broker/tenancy.go); with auth off
// the header means nothing and is ignored.
const RequestInfoHeader = "Nats-Request-Info"

// Who says how the sender of a message is known.
type Who string

const (
	// Anonymous: auth is off; every client is the same anonymous user.
	Anonymous Who = "anonymous"
	// Node: one of the node's own users or an operator (the bench, the
	// tests): a client of the node's account, trusted.
	Node Who = "node"
	// User: a user of the identity store, vouched for by the NATS server.
	User Who = "user"
)

// Principal is who sent a message or request that reached the broker.
type Principal struct {
	Who Who `json:"who"`
	// User, Tenant and Role are the store user's, for Who == User. Role
	// is empty for a user removed since it connected.
	User   string `json:"user,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	Role   string `json:"role,omitempty"`
}

// String names the principal for logs and audit records: the user, or
// "node" or "anonymous".
func (p Principal) String() string {
	if p.Who == User {
		return p.User
	}
	return string(p.Who)
}

// TokenTenant is the tenant whose token streams p reads (its own, or
// none), and whether it reads every tenant's: services, admins, the node,
// and everyone with auth off. INFO reports it.
func (p Principal) TokenTenant() (tenant string, anyTenant bool) {
	if p.Who != User || p.Role == semaq.RoleAdmin || p.Role == semaq.RoleService {
		return p.Tenant, true
	}
	return p.Tenant, false
}

// RequestInfo is the part of RequestInfoHeader the broker reads.
type RequestInfo struct {
	Account string `json:"acc"`
	User    string `json:"user"`
	// Conn and Server are the sending connection's id and the node it
	// is connected to.
	Conn   uint64 `json:"id"`
	Server string `json:"server"`
}

// ParseRequestInfo reads RequestInfoHeader from h; ok is false when there
// is none or it does not parse.
func ParseRequestInfo(h nats.Header) (RequestInfo, bool) {
	v := h.Get(RequestInfoHeader)
	if v == "" {
		return RequestInfo{}, false
	}
	var ri RequestInfo
	if err := json.Unmarshal([]byte(v), &ri); err != nil || ri.Account == "" {
		return RequestInfo{}, false
	}
	return ri, true
}

type headerKey struct{}

// WithRequestHeader gives ctx the headers of the request being served,
// where the sender's principal is read from (Op does it for its ops).
func WithRequestHeader(ctx context.Context, h nats.Header) context.Context {
	return context.WithValue(ctx, headerKey{}, h)
}

// RequestHeader is the headers of the request ctx serves; nil outside one.
func RequestHeader(ctx context.Context) nats.Header {
	h, _ := ctx.Value(headerKey{}).(nats.Header)
	return h
}
