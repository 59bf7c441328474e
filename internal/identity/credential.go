package identity

import (
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/semaq"
)

// A user authenticates with keys of the store (the default: Add makes
// one), or instead with an nkey or a TLS client certificate subject
// (docs/security.md, How the NATS door authenticates). Both of those are
// public: the store never holds a secret for them.

// maxNkeyLen bounds what the nkey check looks at (a user's public nkey is
// 56 characters).
const maxNkeyLen = 64

// validateCredential checks the nkey and certificate subject of a user to
// add; the error names the field at fault.
func validateCredential(r semaq.UserAddRequest) error {
	if nkeys.IsValidPublicKey(r.Name) {
		// The NATS server lists a connection made with an nkey under the
		// nkey: revocation must not mistake one user for another.
		return fmt.Errorf("name: %q is a public nkey; name the user otherwise", r.Name)
	}
	if r.Nkey != "" && r.CertSubject != "" {
		return fmt.Errorf("nkey, cert_subject: give one way to authenticate, not both")
	}
	if (r.Nkey != "" || r.CertSubject != "") && r.ExpiresIn != 0 {
		return fmt.Errorf("expires_in: a user with an nkey or a certificate subject has no key to expire")
	}
	if r.Nkey != "" {
		if err := CheckNkey(r.Nkey); err != nil {
			return fmt.Errorf("nkey: %w", err)
		}
	}
	if r.CertSubject != "" {
		if _, err := ParseDN(r.CertSubject); err != nil {
			return fmt.Errorf("cert_subject: %w", err)
		}
	}
	return nil
}

// CheckNkey checks that s is the public nkey of a user (U…). A seed is
// refused without being echoed: it is the user's secret.
func CheckNkey(s string) error {
	if len(s) > maxNkeyLen {
		return fmt.Errorf("longer than %d characters: a user's public nkey is 56", maxNkeyLen)
	}
	if nkeys.IsValidPublicUserKey(s) {
		return nil
	}
	if strings.HasPrefix(s, "S") {
		// A seed, or a mistyped one: not echoed, it is a secret.
		return fmt.Errorf("this looks like a seed, the secret half of an nkey: give its public key (U…), " +
			"which `nk -inkey SEED_FILE -pubout` prints, and keep the seed with the user")
	}
	if nkeys.IsValidPublicKey(s) {
		return fmt.Errorf("%q is the public key of %s, not of a user: a user's starts with U", s, prefixName(nkeys.Prefix(s)))
	}
	return fmt.Errorf("%q is not a public nkey: a user's is 56 characters starting with U", s)
}

func prefixName(p nkeys.PrefixByte) string {
	switch p {
	case nkeys.PrefixByteAccount:
		return "an account (A…)"
	case nkeys.PrefixByteOperator:
		return "an operator (O…)"
	case nkeys.PrefixByteServer:
		return "a server (N…)"
	case nkeys.PrefixByteCluster:
		return "a cluster (C…)"
	case nkeys.PrefixByteCurve:
		return "a curve key (X…)"
	default:
		return "another kind"
	}
}
