package auth

import (
	"crypto/x509"

	"github.com/nats-io/nats-server/v2/server"
)

// Store users without a key: by nkey, or by TLS client certificate
// (docs/security.md, How the NATS door authenticates). The order of
// check is the rule when a client presents more than one: an nkey, then a
// key, then a certificate; a certificate beside an nkey or a key has
// authenticated the channel only.

// IsNodeNkey reports whether pub is the nkey of a node user or operator:
// those are admitted before the store is asked, so no store user may
// have one (identity.Store.ReserveNkeys).
func (a *Authenticator) IsNodeNkey(pub string) bool {
	_, ok := a.deps.NodeUsers[pub]
	return ok
}

// checkNkey admits a store user by its nkey: the signature of the
// server's nonce, then the user the store maps the nkey to. A user name
// sent with it (client.WithUser) must be that user's.
func (a *Authenticator) checkNkey(c server.ClientAuthentication, o *server.ClientOpts) string {
	s := a.store.Load()
	if s == nil || !verifyNkey(o.Nkey, o.Sig, c.GetNonce()) {
		return "nkey"
	}
	p, err := s.AuthenticateNkey(o.Nkey)
	if err != nil || o.Username != "" && o.Username != p.User {
		return "nkey"
	}
	return a.admit(c, p, "nkey", func() bool {
		q, err := s.AuthenticateNkey(o.Nkey)
		return err == nil && q.User == p.User
	})
}

// checkCert admits the store user mapped to the subject of cert, a client
// certificate the TLS handshake verified against tls_client_ca. A user
// name sent with it must be that user's.
func (a *Authenticator) checkCert(c server.ClientAuthentication, o *server.ClientOpts, cert *x509.Certificate) string {
	s := a.store.Load()
	if s == nil {
		return "cert"
	}
	p, err := s.AuthenticateCert(cert)
	if err != nil || o.Username != "" && o.Username != p.User {
		return "cert"
	}
	return a.admit(c, p, "cert", func() bool {
		q, err := s.AuthenticateCert(cert)
		return err == nil && q.User == p.User
	})
}

// verifiedLeaf is the client certificate of c's TLS handshake, when the
// server verified it (a client CA is configured): the leaf of the first
// verified chain. Nil otherwise: an unverified certificate names no one.
func verifiedLeaf(c server.ClientAuthentication) *x509.Certificate {
	st := c.GetTLSConnectionState()
	if st == nil || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return nil
	}
	return st.VerifiedChains[0][0]
}
