package policies

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/pii"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The vault keeps what tokenize replaced, so the tenant that sent a value
// can have it back (APIPolicyRestore; the gateway restores answers). One
// KV entry per tenant and scope: a session's messages share one numbering
// (the same address is <EMAIL_1> in every round), a request's is its own.
// An entry is AES-256-GCM sealed with the node's vault key, its KV key as
// additional data, so an entry cannot be read under another key's name;
// the KV key is a hash of tenant and scope, so neither is on disk in the
// clear. Entries expire VaultTTL after their last write (the bucket's
// MaxAge).

// vaultBytes bounds the vault on disk: a full vault refuses new values,
// and a message that needs one is refused rather than stored unredacted.
const vaultBytes = 256 << 20

// maxScopeValues bounds one scope's values (a long session): past it a
// message that needs a new placeholder is refused.
const maxScopeValues = 10_000

// errVaultConflict says another message of the scope wrote first: read
// again and redo.
var errVaultConflict = errors.New("vault entry changed")

type vault struct {
	kv   jetstream.KeyValue
	aead cipher.AEAD // nil without a key: tokenize is refused
	ttl  time.Duration
}

func openVault(ctx context.Context, js jetstream.JetStream, replicas int, clustered bool, key []byte, ttl time.Duration) (*vault, error) {
	v := &vault{ttl: ttl}
	if key != nil {
		if len(key) != 32 {
			return nil, fmt.Errorf("policy: the PII vault key has %d bytes; it needs 32", len(key))
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("policy: vault key: %w", err)
		}
		if v.aead, err = cipher.NewGCM(block); err != nil {
			return nil, fmt.Errorf("policy: vault key: %w", err)
		}
	}
	kv, err := jsutil.Bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      reserved.VaultBucket,
		Description: "SemaQ PII vault: tokenized values, sealed",
		History:     1,
		TTL:         ttl,
		MaxBytes:    vaultBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("policy: bucket %s: %w", reserved.VaultBucket, err)
	}
	if clustered {
		// A restore on one node right after a message tokenized on another
		// must find its values: reads go to the stream's leader, not to a
		// replica that may not have applied the write yet (a direct get).
		if kv, err = jsutil.LeaderReads(ctx, js, reserved.VaultBucket); err != nil {
			return nil, fmt.Errorf("policy: bucket %s: %w", reserved.VaultBucket, err)
		}
	}
	v.kv = kv
	return v, nil
}

// vaultEntry is one scope's values, sealed in its KV entry.
type vaultEntry struct {
	Tenant string            `json:"t"`
	Scope  string            `json:"s"`
	Values map[string]string `json:"v"` // placeholder -> value
	Counts map[string]int    `json:"n"` // type -> placeholders given
}

// entryKey is the KV key of tenant's scope.
func entryKey(tenant, scope string) string {
	h := sha256.Sum256([]byte(semaq.TokenTenant(tenant) + "\x00" + scope))
	return hex.EncodeToString(h[:24])
}

func (v *vault) seal(key string, e *vaultEntry) ([]byte, error) {
	plain, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, v.aead.NonceSize(), v.aead.NonceSize()+len(plain)+v.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return v.aead.Seal(nonce, nonce, plain, []byte(key)), nil
}

func (v *vault) open(key string, sealed []byte) (*vaultEntry, error) {
	n := v.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("vault entry is too short")
	}
	plain, err := v.aead.Open(nil, sealed[:n], sealed[n:], []byte(key))
	if err != nil {
		return nil, errors.New("vault entry does not open with this node's key: the nodes' vault keys differ, or the entry was changed")
	}
	var e vaultEntry
	if err := json.Unmarshal(plain, &e); err != nil {
		return nil, fmt.Errorf("vault entry: %w", err)
	}
	return &e, nil
}

// read returns tenant's scope and its revision; nil, 0 when there is none.
func (v *vault) read(ctx context.Context, tenant, scope string) (*vaultEntry, uint64, error) {
	if v.aead == nil {
		return nil, 0, errNoVaultKey
	}
	key := entryKey(tenant, scope)
	kve, err := v.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	e, err := v.open(key, kve.Value())
	if err != nil {
		return nil, 0, err
	}
	if e.Tenant != tenant || e.Scope != scope {
		// A hash collision or a planted entry: never another tenant's.
		return nil, 0, nil
	}
	return e, kve.Revision(), nil
}

var errNoVaultKey = errors.New("this node has no PII vault key (pii_vault_key_file): tokenize is not available")

// scopeTokens numbers the values one message tokenizes in its scope: a
// pii.Tokenizer for one message, committed once it is redacted. Not safe
// for concurrent use.
type scopeTokens struct {
	v             *vault
	tenant, scope string
	loaded        bool
	rev           uint64
	e             *vaultEntry
	byValue       map[string]string // type+"\x00"+value -> placeholder
	dirty         bool
	ctx           context.Context
}

// tokens numbers a message's values in tenant's scope. With fresh, the
// scope is taken to be new (a request's, whose id is rarely seen twice):
// nothing is read first, and a scope that exists after all fails the
// commit's create, and is read on the next try.
func (v *vault) tokens(ctx context.Context, tenant, scope string, fresh bool) *scopeTokens {
	st := &scopeTokens{v: v, tenant: tenant, scope: scope, ctx: ctx}
	if fresh && v.aead != nil {
		st.loaded, st.byValue = true, map[string]string{}
		st.e = &vaultEntry{Tenant: tenant, Scope: scope, Values: map[string]string{}, Counts: map[string]int{}}
	}
	return st
}

// Token gives value of type t its placeholder in the scope: the one it has,
// or the type's next.
func (st *scopeTokens) Token(t pii.Type, value string) (string, error) {
	if !st.loaded {
		e, rev, err := st.v.read(st.ctx, st.tenant, st.scope)
		if err != nil {
			return "", err
		}
		if e == nil {
			e = &vaultEntry{Tenant: st.tenant, Scope: st.scope, Values: map[string]string{}, Counts: map[string]int{}}
		}
		st.e, st.rev, st.loaded = e, rev, true
		st.byValue = make(map[string]string, len(e.Values))
		for ph, val := range e.Values {
			st.byValue[placeholderType(ph)+"\x00"+val] = ph
		}
	}
	k := string(t) + "\x00" + value
	if ph, ok := st.byValue[k]; ok {
		return ph, nil
	}
	if len(st.e.Values) >= maxScopeValues {
		return "", fmt.Errorf("the scope holds %d tokenized values (limit)", maxScopeValues)
	}
	st.e.Counts[string(t)]++
	ph := pii.Placeholder(t, st.e.Counts[string(t)])
	st.e.Values[ph] = value
	st.byValue[k] = ph
	st.dirty = true
	return ph, nil
}

// placeholderType is the type part of a placeholder's key in byValue: its
// text up to the last '_', which is unique per type.
func placeholderType(ph string) string {
	if i := strings.LastIndexByte(ph, '_'); i > 0 {
		return strings.ToLower(strings.ReplaceAll(ph[1:i], "_", "-"))
	}
	return ph
}

// commit stores what Token gave out; errVaultConflict when another message
// of the scope did first.
func (st *scopeTokens) commit(ctx context.Context) error {
	if !st.dirty {
		return nil
	}
	key := entryKey(st.tenant, st.scope)
	sealed, err := st.v.seal(key, st.e)
	if err != nil {
		return err
	}
	if st.rev == 0 {
		_, err = st.v.kv.Create(ctx, key, sealed)
	} else {
		_, err = st.v.kv.Update(ctx, key, sealed, st.rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		return errVaultConflict
	}
	return err
}

func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// restore returns tenant's scope's values. Another tenant's scope is not
// found, the same as one that never was.
func (v *vault) restore(ctx context.Context, tenant, scope string) (map[string]string, error) {
	e, _, err := v.read(ctx, tenant, scope)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, nil
	}
	return e.Values, nil
}
