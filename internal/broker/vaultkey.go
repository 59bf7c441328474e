package broker

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// vaultKeyFile is where a node alone keeps the PII vault key it made.
const vaultKeyFile = "pii-vault.key"

// vaultKey is the key that seals the PII vault (docs/policy.md, The
// vault): pii_vault_key_file's; else derived from the cluster secret,
// which every node shares; else, on a node alone, <data>/pii-vault.key,
// made at first start. A cluster without either has none: its rules may
// not tokenize.
func (s *Server) vaultKey() ([]byte, error) {
	switch {
	case s.cfg.PIIVaultKeyFile != "":
		return readVaultKey(s.cfg.PIIVaultKeyFile)
	case s.cfg.ClusterSecretFile != "":
		secret, err := readClusterSecret(s.cfg.ClusterSecretFile)
		if err != nil {
			return nil, err
		}
		return hkdf.Key(sha256.New, secret, nil, "semaq pii vault", 32)
	case s.cfg.Clustered():
		return nil, nil
	}
	path := filepath.Join(s.cfg.DataDir, vaultKeyFile)
	key, err := readVaultKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("pii vault key: %w", err)
	}
	return key, nil
}

// readVaultKey reads 64 hex digits from path, a file only its owner reads.
func readVaultKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("pii_vault_key_file: %w", err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("pii_vault_key_file: %s is readable by other users (mode %04o): whoever reads it reads the vault; chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	if fi.Size() > 256 {
		return nil, fmt.Errorf("pii_vault_key_file: %s holds %d bytes; a key is 64 hex digits", path, fi.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pii_vault_key_file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("pii_vault_key_file: %s does not hold 64 hex digits (make one with: openssl rand -hex 32 > %s)", path, path)
	}
	return key, nil
}

// pluginKeys are PluginKeys decoded.
func (c *Config) pluginKeys() ([][]byte, error) {
	var out [][]byte
	for i, k := range c.PluginKeys {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(k))
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("plugin_keys: entry %d is not the base64 of a %d-byte ed25519 public key", i+1, ed25519.PublicKeySize)
		}
		out = append(out, b)
	}
	return out, nil
}
