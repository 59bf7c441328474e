// Package chains is the provenance subsystem (docs/provenance.md): the
// node's signing key, the cluster's public keys, and the API that reads a
// session's chain head ($SQ.API.PROVENANCE.*). The chains themselves are
// written by the ingress (internal/broker/ingress, chain.go); their head
// records are chainhead's.
package chains

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/chainhead"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// Deps is what the subsystem needs from the node.
type Deps struct {
	Log *slog.Logger
	// JS and Conn are the node's internal JetStream and connection.
	JS   jetstream.JetStream
	Conn *nats.Conn
	// Node is the node's name, under which its key is published.
	Node string
	// KeyFile holds the node's Ed25519 key (a hex seed); made, mode 0600,
	// when missing.
	KeyFile string
	// Replicas is what the keys bucket is made with.
	Replicas int
	// Principal names the sender of an API request.
	Principal func(nats.Header) api.Principal
}

// Chains is the open subsystem.
type Chains struct {
	deps Deps
	key  ed25519.PrivateKey
	id   string
	kv   jetstream.KeyValue
}

// KeysFile is where a node keeps its signing key, in its data directory.
const KeysFile = "provenance-ed25519.key"

// Open loads (or makes) the node's key and publishes its public half.
func Open(ctx context.Context, d Deps) (*Chains, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	key, made, err := loadKey(d.KeyFile)
	if err != nil {
		return nil, err
	}
	c := &Chains{deps: d, key: key, id: provenance.KeyID(key.Public().(ed25519.PublicKey))}
	if made {
		d.Log.Info("provenance signing key made", "file", d.KeyFile, "key_id", c.id)
	}
	c.kv, err = jsutil.Bucket(ctx, d.JS, jetstream.KeyValueConfig{Bucket: reserved.ProvenanceKeyBucket, History: 1,
		Description: "The public keys that sign session chains, one per node and key (docs/provenance.md).", Replicas: d.Replicas})
	if err != nil {
		return nil, fmt.Errorf("provenance: keys bucket: %w", err)
	}
	pk := semaq.ProvenanceKey{ID: c.id, Node: d.Node, PublicKey: key.Public().(ed25519.PublicKey), Created: time.Now().UTC()}
	entryKey := sanitize(d.Node) + "." + c.id
	// A key is one node's, listed once: its entries under the node's
	// former names go (an unnamed node's name is NATS's server id, new
	// at each start), and the first one's creation time stays.
	if lister, err := c.kv.ListKeys(ctx); err == nil {
		for k := range lister.Keys() {
			if k != entryKey && !strings.HasSuffix(k, "."+c.id) {
				continue
			}
			if e, err := c.kv.Get(ctx, k); err == nil {
				var have semaq.ProvenanceKey
				if json.Unmarshal(e.Value(), &have) == nil && !have.Created.IsZero() && have.Created.Before(pk.Created) {
					pk.Created = have.Created
				}
			}
			if k != entryKey {
				if err := c.kv.Delete(ctx, k); err != nil {
					return nil, fmt.Errorf("provenance: dropping the key's entry %s: %w", k, err)
				}
			}
		}
	}
	b, _ := json.Marshal(pk)
	if err := putKey(ctx, c.kv, entryKey, b); err != nil {
		return nil, fmt.Errorf("provenance: publishing the node's key: %w", err)
	}
	return c, nil
}

// keyPutWait bounds how long a starting node retries publishing its key
// while the keys bucket has no leader (a node of the cluster just died:
// an election takes seconds).
const keyPutWait = 2 * time.Minute

// putKey puts the node's key, again while the bucket's stream does not
// answer: a node that restarts while another is down must not exit for
// it (the fault harness, docs/faults.md, saw it happen).
func putKey(ctx context.Context, kv jetstream.KeyValue, key string, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, keyPutWait)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := kv.Put(actx, key, value)
		acancel()
		noAnswer := errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		if err == nil || !noAnswer || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond): // the election under way
		}
	}
}

// sanitize makes a node name a KV key token.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// loadKey reads the key in file, or makes one there.
func loadKey(file string) (ed25519.PrivateKey, bool, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, false, err
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return nil, false, fmt.Errorf("provenance: %w", err)
		}
		if err := os.WriteFile(file, []byte(hex.EncodeToString(priv.Seed())+"\n"), 0o600); err != nil {
			return nil, false, fmt.Errorf("provenance: writing the signing key: %w", err)
		}
		return priv, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("provenance: reading the signing key: %w", err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, false, fmt.Errorf("provenance: %s is not an Ed25519 seed (%d hex characters)", file, 2*ed25519.SeedSize)
	}
	return ed25519.NewKeyFromSeed(seed), false, nil
}

// Key is the node's signing key, for the ingress.
func (c *Chains) Key() ed25519.PrivateKey { return c.key }

// Handlers serves $SQ.API.PROVENANCE.*.
func (c *Chains) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIProvenanceHead: api.Op(c.deps.Log, "provenance head", c.head, nil),
		semaq.APIProvenanceKeys: api.Op(c.deps.Log, "provenance keys", c.keys, nil),
	}
}

// Close has nothing to stop.
func (c *Chains) Close(context.Context) error { return nil }

// head answers a session's chain head. A user with a tenant reads its own
// tenant's chains only; admins and services any tenant's.
func (c *Chains) head(ctx context.Context, req *semaq.ProvenanceHeadRequest) (any, error) {
	if err := semaq.CheckStreamName(req.Stream); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "provenance head: %v", err)
	}
	if req.Session == "" || len(req.Session) > semaq.MaxEnvelopeValue {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "provenance head: a session id of 1 to %d bytes is needed", semaq.MaxEnvelopeValue)
	}
	tenant, err := c.tenant(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	info, err := c.deps.JS.Stream(ctx, req.Stream)
	if err != nil {
		return nil, api.JSError(err, "provenance head: stream %s", req.Stream)
	}
	md := info.CachedInfo().Config.Metadata
	if md[reserved.MetadataProvenance] == "" && md[reserved.MetadataSessionOrder] == "" {
		return nil, semaq.NewAPIError(semaq.ErrChainNotFound, "stream %s does not chain its sessions (add it with --provenance or --session-order)", req.Stream)
	}
	h, found, complete, err := chainhead.Settled(ctx, c.deps.Conn, req.Stream, tenant, req.Session, md[reserved.MetadataSessionOrder])
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "provenance head: stream %s: %v", req.Stream, err)
	}
	if !found {
		return nil, semaq.NewAPIError(semaq.ErrChainNotFound, "stream %s has no chain for session %q%s", req.Stream, req.Session, ofTenant(tenant))
	}
	out := h.Public(req.Stream, tenant, req.Session)
	out.Settling = !complete
	return out, nil
}

func ofTenant(t string) string {
	if t == "" {
		return ""
	}
	return " of tenant " + t
}

// tenant is the tenant a request acts in.
func (c *Chains) tenant(ctx context.Context, tenant string) (string, error) {
	if tenant != "" {
		if err := semaq.CheckName(tenant); err != nil {
			return "", semaq.NewAPIError(semaq.ErrBadRequest, "provenance: tenant: %v", err)
		}
	}
	if c.deps.Principal == nil {
		return tenant, nil
	}
	p := c.deps.Principal(api.RequestHeader(ctx))
	if p.Who != api.User || p.Role == semaq.RoleAdmin || p.Role == semaq.RoleService {
		return tenant, nil
	}
	if tenant != "" && tenant != p.Tenant {
		return "", semaq.NewAPIError(semaq.ErrForbidden, "provenance: user %s reads its own tenant's chains only; leave the tenant out", p.User)
	}
	return p.Tenant, nil
}

// keys answers every node's public keys.
func (c *Chains) keys(ctx context.Context, _ *struct{}) (any, error) {
	lister, err := c.kv.ListKeys(ctx)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "provenance keys: %v", err)
	}
	out := semaq.ProvenanceKeys{Keys: []semaq.ProvenanceKey{}}
	for k := range lister.Keys() {
		e, err := c.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var pk semaq.ProvenanceKey
		if json.Unmarshal(e.Value(), &pk) == nil {
			out.Keys = append(out.Keys, pk)
		}
	}
	sort.Slice(out.Keys, func(i, j int) bool { return out.Keys[i].Node+out.Keys[i].ID < out.Keys[j].Node+out.Keys[j].ID })
	return out, nil
}
