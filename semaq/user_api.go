package semaq

import (
	"fmt"
	"time"
)

// The user API: identities of a node started with auth on
// (docs/security.md, Identities). Only the admin role may call it.
const (
	APIUserAdd    = "$SQ.API.USER.ADD"     // UserAddRequest -> UserAddResponse (the key, shown once)
	APIUserList   = "$SQ.API.USER.LIST"    // (empty) -> UserListResponse
	APIUserInfoT  = "$SQ.API.USER.INFO.%s" // (empty) -> UserInfo
	APIUserRemove = "$SQ.API.USER.RM"      // UserRemoveRequest -> UserRemoveResponse
	APIUserRotate = "$SQ.API.USER.ROTATE"  // UserRotateRequest -> UserAddResponse (the new key, shown once)
	APIUserQuota  = "$SQ.API.USER.QUOTA"   // UserQuotaRequest -> UserInfo
)

// UserInboxPrefix starts the reply inbox of an authenticated user:
// user <name> may subscribe to UserInboxPrefix+"<name>.>" and to no other
// inbox. The SDK sets nats.CustomInboxPrefix(UserInboxPrefix+name) when
// given a key.
const UserInboxPrefix = "_INBOX_"

// MaxNameLen bounds a user or tenant name.
const MaxNameLen = 64

// CheckName checks a user or tenant name: 1 to MaxNameLen letters, digits,
// '_' and '-', so the name is one NATS subject token (of the user's
// inbox, of a tenant's token streams).
func CheckName(s string) error {
	if s == "" {
		return fmt.Errorf("empty")
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("longer than %d characters", MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q has %q: use letters, digits, '_' and '-'", s, c)
		}
	}
	return nil
}

// Roles of a user.
const (
	RoleAdmin     = "admin"
	RolePublisher = "publisher"
	RoleReader    = "reader"
	RoleWorker    = "worker"
	RoleService   = "service"
)

var (
	// ErrUserNotFound matches a user name the store does not hold.
	ErrUserNotFound = &APIError{Code: 404, ErrCode: ErrCodeUserNotFound, Description: "user not found"}
	// ErrUserExists matches an add of a name the store already holds.
	ErrUserExists = &APIError{Code: 400, ErrCode: ErrCodeUserExists, Description: "user already exists"}
	// ErrForbidden matches a request or message the broker refuses
	// because of who sent it: a tenant that is not the publisher's, a
	// subject or queue outside the user's grants.
	ErrForbidden = &APIError{Code: 403, ErrCode: ErrCodeForbidden, Description: "not permitted"}
)

// UserAddRequest creates a user. Subjects are the NATS subjects (wildcards
// allowed) a publisher, reader or service works on; Queues are globs over
// queue names (path.Match syntax) a worker serves.
//
// A user gets a key, unless it authenticates by Nkey or CertSubject
// instead (at most one of the two); then the store holds nothing secret
// for it and no key is made.
type UserAddRequest struct {
	Name     string   `json:"name"`
	Tenant   string   `json:"tenant,omitempty"`
	Role     string   `json:"role"`
	Subjects []string `json:"subjects,omitempty"`
	Queues   []string `json:"queues,omitempty"`
	// ExpiresIn makes the key stop working that long after it is made
	// (at most MaxKeyLifetime); zero: it works until rotated or removed.
	ExpiresIn time.Duration `json:"expires_in,omitempty"`
	// RPM and TPM are the user's own quotas (docs/quotas.md): requests and
	// prompt tokens per minute, on top of its tenant's; 0 is no limit.
	RPM int64 `json:"rpm,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
	// Nkey is the user's public nkey (U…): the client signs the server's
	// nonce with its seed.
	Nkey string `json:"nkey,omitempty"`
	// CertSubject is the subject of the user's TLS client certificates,
	// an RFC 4514 distinguished name ("CN=gpu-7,O=acme"), on a broker
	// that verifies client certificates (tls_client_ca).
	CertSubject string `json:"cert_subject,omitempty"`
}

// MaxKeyLifetime bounds ExpiresIn.
const MaxKeyLifetime = 10 * 365 * 24 * time.Hour

// UserInfo describes a user. It never carries a key or its hash.
type UserInfo struct {
	Name     string    `json:"name"`
	Tenant   string    `json:"tenant,omitempty"`
	Role     string    `json:"role"`
	Subjects []string  `json:"subjects,omitempty"`
	Queues   []string  `json:"queues,omitempty"`
	RPM      int64     `json:"rpm,omitempty"`
	TPM      int64     `json:"tpm,omitempty"`
	Created  time.Time `json:"created"`
	// Keys are the IDs (the public lookup handles) of the user's keys.
	Keys []KeyInfo `json:"keys"`
	// Nkey is the user's public nkey, if it authenticates by one.
	Nkey string `json:"nkey,omitempty"`
	// CertSubject is the canonical subject of the user's TLS client
	// certificates, if it authenticates by one.
	CertSubject string `json:"cert_subject,omitempty"`
}

// KeyInfo is the public part of one key.
type KeyInfo struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// Expires is when the key stops working; zero: never.
	Expires time.Time `json:"expires,omitzero"`
}

// UserAddResponse is the user and its key, which the broker shows this
// once and never again. Key is empty for a user added with an nkey or a
// certificate subject.
type UserAddResponse struct {
	User UserInfo `json:"user"`
	Key  string   `json:"key,omitempty"`
}

// UserListResponse lists the users, by name.
type UserListResponse struct {
	Users []UserInfo `json:"users"`
}

// UserRemoveRequest removes a user; its open connections are closed.
type UserRemoveRequest struct {
	Name string `json:"name"`
}

// UserRemoveResponse says how many open connections the removal closed.
type UserRemoveResponse struct {
	Success bool `json:"success"`
	Closed  int  `json:"closed"`
}

// UserRotateRequest replaces a user's keys with a new one; the old keys
// stop working at once and their open connections are closed.
type UserRotateRequest struct {
	Name string `json:"name"`
	// ExpiresIn is the new key's lifetime, as in UserAddRequest.
	ExpiresIn time.Duration `json:"expires_in,omitempty"`
}

// UserQuotaRequest changes a user's own quotas (docs/quotas.md): a field
// left out keeps its value, 0 removes the limit.
type UserQuotaRequest struct {
	Name string `json:"name"`
	RPM  *int64 `json:"rpm,omitempty"`
	TPM  *int64 `json:"tpm,omitempty"`
}
