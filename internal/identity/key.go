package identity

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// A key is "sq_<name>_<id>_<secret>":
//
//   - name is the user's name, so a client holding only its key knows whom
//     it connects as (its reply inbox is _INBOX_<name>);
//   - id is keyIDLen lower-case base32 characters, the key's public
//     lookup handle, shown by `semaq user ls`;
//   - secret is 32 random bytes in unpadded base64url (secretLen
//     characters). Only its SHA-256 is stored.
//
// The name may itself hold '_', and base64url uses '_' and '-': the key is
// parsed from the right, by the fixed lengths of id and secret.
const (
	keyPrefix   = "sq_"
	keyIDLen    = 12
	secretBytes = 32
	secretLen   = 43 // base64.RawURLEncoding.EncodedLen(secretBytes)
	// maxKeyLen bounds what the parser looks at: a longer string is not a
	// key, whatever it holds.
	maxKeyLen = len(keyPrefix) + maxNameLen + 1 + keyIDLen + 1 + secretLen
)

// ErrBadKey is returned for a string that is not a well-formed key. It
// never carries the string: a key is a secret, even a mistyped one.
var ErrBadKey = errors.New("identity: malformed key")

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Key is a parsed key.
type Key struct {
	Name   string
	ID     string
	Secret []byte // the decoded 32 bytes
}

// ParseKey splits a key into its parts. It checks the form only: whether
// the key belongs to anyone is Store.Authenticate's business.
func ParseKey(s string) (Key, error) {
	if len(s) > maxKeyLen || !strings.HasPrefix(s, keyPrefix) {
		return Key{}, ErrBadKey
	}
	rest := s[len(keyPrefix):]
	tail := 1 + keyIDLen + 1 + secretLen
	if len(rest) < 1+tail {
		return Key{}, ErrBadKey
	}
	name, tailStr := rest[:len(rest)-tail], rest[len(rest)-tail:]
	if tailStr[0] != '_' || tailStr[1+keyIDLen] != '_' {
		return Key{}, ErrBadKey
	}
	id, sec := tailStr[1:1+keyIDLen], tailStr[2+keyIDLen:]
	if checkName(name) != nil || !validID(id) {
		return Key{}, ErrBadKey
	}
	secret, err := base64.RawURLEncoding.Strict().DecodeString(sec)
	if err != nil || len(secret) != secretBytes {
		return Key{}, ErrBadKey
	}
	return Key{Name: name, ID: id, Secret: secret}, nil
}

// String is the key in its text form; "" for the zero Key (a user added
// with an nkey or a certificate subject has no key).
func (k Key) String() string {
	if k.Name == "" {
		return ""
	}
	return keyPrefix + k.Name + "_" + k.ID + "_" + base64.RawURLEncoding.EncodeToString(k.Secret)
}

func validID(id string) bool {
	if len(id) != keyIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// newKey makes a key for user name.
func newKey(name string) (Key, error) {
	var raw [secretBytes + 8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Key{}, fmt.Errorf("identity: generating a key: %w", err)
	}
	id := idEncoding.EncodeToString(raw[secretBytes:])[:keyIDLen]
	return Key{Name: name, ID: id, Secret: raw[:secretBytes]}, nil
}

// hashSecret is what the store keeps of a secret. A key's secret is 256
// random bits: nothing is gained by a slow password hash, which exists to
// make guessing a low-entropy password costly (docs/security.md).
func hashSecret(secret []byte) []byte {
	h := sha256.Sum256(secret)
	return h[:]
}

// secretMatches compares in constant time.
func secretMatches(secret, hash []byte) bool {
	h := hashSecret(secret)
	return subtle.ConstantTimeCompare(h, hash) == 1
}
