package plugin

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
)

// Sign returns the signature Verify accepts: ed25519 over the module's SHA-256.
func Sign(wasm []byte, key ed25519.PrivateKey) []byte {
	sum := sha256.Sum256(wasm)
	return ed25519.Sign(key, sum[:])
}

// Verify checks that sig is an ed25519 signature of wasm's SHA-256 by one of keys.
func Verify(wasm, sig []byte, keys []ed25519.PublicKey) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no trusted key to verify it with", ErrBadSignature)
	}
	if len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: a signature is %d bytes, this one %d", ErrBadSignature, ed25519.SignatureSize, len(sig))
	}
	sum := sha256.Sum256(wasm)
	for _, k := range keys {
		if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, sum[:], sig) {
			return nil
		}
	}
	return fmt.Errorf("%w under any of the %d trusted keys (sha256 %x)", ErrBadSignature, len(keys), sum)
}
