package identity

import (
	"crypto/x509"

	"github.com/semaq/semaq/semaq"
)

// Lookups of users that authenticate by nkey or certificate subject
// (credential.go). Like Authenticate, they read the snapshot only.

// indexCredentials fills byNkey and byCert from byName.
func (s *snapshot) indexCredentials() {
	s.byNkey, s.byCert = map[string]*User{}, map[string]*User{}
	claim := func(m map[string]*User, k string, u *User) {
		if _, taken := m[k]; taken {
			m[k] = nil // ambiguous: opens no one
			return
		}
		m[k] = u
	}
	for _, u := range s.byName {
		if u.Nkey != "" {
			claim(s.byNkey, u.Nkey, u)
		}
		if u.CertSubject != "" {
			claim(s.byCert, u.CertSubject, u)
		}
	}
}

// ReserveNkeys tells the store which nkeys are the node's own (its users'
// and operators'): Add refuses them, since the node admits its own users
// before it looks in the store.
func (s *Store) ReserveNkeys(reserved func(pub string) bool) { s.reservedNkey.Store(&reserved) }

// credential sets the nkey or certificate subject of u, a user to add
// from r (already validated), and drops its key. Another user's nkey or
// subject is refused; two adds racing with the same one are caught by
// the snapshot, which then admits neither.
func (s *Store) credential(u *User, r semaq.UserAddRequest) error {
	snap := s.state.Load()
	u.Keys = []UserKey{}
	if r.Nkey != "" {
		if f := s.reservedNkey.Load(); f != nil && (*f)(r.Nkey) {
			return semaq.NewAPIError(semaq.ErrBadRequest, "user: nkey: %s is the nkey of one of the node's own users or operators", r.Nkey)
		}
		if o, taken := snap.byNkey[r.Nkey]; taken {
			return semaq.NewAPIError(semaq.ErrBadRequest, "user: nkey: %s is already %s", r.Nkey, owner(o))
		}
		u.Nkey = r.Nkey
	}
	if r.CertSubject != "" {
		dn, err := CanonicalDN(r.CertSubject)
		if err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "user: cert_subject: %v", err)
		}
		if o, taken := snap.byCert[dn]; taken {
			return semaq.NewAPIError(semaq.ErrBadRequest, "user: cert_subject: %s is already %s", dn, owner(o))
		}
		u.CertSubject = dn
	}
	return nil
}

func owner(u *User) string {
	if u == nil {
		return "claimed by two users"
	}
	return "the credential of user " + u.Name
}

// AuthenticateNkey returns the user whose public nkey is pub, from the
// snapshot, without I/O. The caller checks the signature over the
// server's nonce. An nkey of no user (or of two) is ErrUnknownKey.
func (s *Store) AuthenticateNkey(pub string) (Principal, error) {
	u := s.state.Load().byNkey[pub]
	if u == nil {
		return Principal{}, ErrUnknownKey
	}
	return u.principal(), nil
}

// AuthenticateCert returns the user mapped to the subject of cert, a
// client certificate the TLS handshake verified. A subject mapped to no
// user (or to two) is ErrUnknownKey.
func (s *Store) AuthenticateCert(cert *x509.Certificate) (Principal, error) {
	dn := CertSubject(cert)
	if dn == "" {
		return Principal{}, ErrUnknownKey
	}
	u := s.state.Load().byCert[dn]
	if u == nil {
		return Principal{}, ErrUnknownKey
	}
	return u.principal(), nil
}

// principal is who u is, as the authenticator sees it.
func (u *User) principal() Principal {
	return Principal{User: u.Name, Tenant: u.Tenant, Role: u.Role, Subjects: u.Subjects, Queues: u.Queues}
}
