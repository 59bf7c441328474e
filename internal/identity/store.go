// Package identity is the node's identity store: users (name, tenant,
// role, subject and queue grants) and their keys, in the replicated KV
// bucket SQ_USERS (docs/security.md, Identities).
//
// A key's secret is never stored: only its SHA-256, compared in constant
// time. The store keeps an immutable snapshot of the bucket, rebuilt by a
// KV watcher (jsutil.Follower) on each change, so Authenticate — called by
// the NATS server for every connection — does no I/O. A write through the
// store returns once this node's snapshot shows it: a removed user or a
// rotated-away key is refused by the next authentication on this node.
package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// bucketBytes bounds the store on disk.
const bucketBytes = 64 << 20

// ErrUnknownKey is a well-formed key that opens nothing: no such key ID,
// a key of another user, a wrong secret, a removed user or a rotated-away
// key. Callers must not tell a client which.
var ErrUnknownKey = errors.New("identity: unknown key")

// ErrExpiredKey is a key past its expiry. Callers must not tell a client
// which refusal it got; it is counted apart.
var ErrExpiredKey = errors.New("identity: expired key")

// Principal is who an authenticated key is.
type Principal struct {
	User     string
	Tenant   string
	Role     string
	Subjects []string
	Queues   []string
	// Expires is when the key stops working; zero: never.
	Expires time.Time
}

// Store is the identity store. Its methods are safe for concurrent use.
type Store struct {
	kv    jetstream.KeyValue
	state *jsutil.Follower[*snapshot]
	now   func() time.Time
	// reservedNkey reports whether an nkey is the node's own (a node
	// user's or an operator's); nil: none is.
	reservedNkey atomic.Pointer[func(string) bool]
}

// snapshot is an immutable view of the bucket.
type snapshot struct {
	byName map[string]*User
	byKey  map[string]*User // key ID → its user
	// byNkey and byCert find the user of an nkey or a canonical
	// certificate subject. Two users claiming the same one (two adds
	// racing) map it to nil: it opens neither.
	byNkey map[string]*User
	byCert map[string]*User
}

// Open creates the bucket when missing, loads every user and starts the
// watcher. js must be the internal connection's: it is the only writer of
// SQ_USERS. replicas is the bucket's replicas (0 means 1); a bucket with
// fewer is raised to them. ctx bounds the opening only.
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := jsutil.Bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      reserved.UserBucket,
		Description: "SemaQ identities",
		History:     1,
		MaxBytes:    bucketBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("identity: bucket %s: %w", reserved.UserBucket, err)
	}
	users := map[string]*User{}
	apply := func(e jetstream.KeyValueEntry) {
		if e.Operation() != jetstream.KeyValuePut {
			delete(users, e.Key())
			return
		}
		var u User
		if err := json.Unmarshal(e.Value(), &u); err != nil || u.Name != e.Key() {
			// A value this node cannot read opens nothing.
			delete(users, e.Key())
			return
		}
		users[e.Key()] = &u
	}
	snap := func() *snapshot {
		s := &snapshot{byName: make(map[string]*User, len(users)), byKey: make(map[string]*User, len(users))}
		for n, u := range users {
			s.byName[n] = u
			for _, k := range u.Keys {
				s.byKey[k.ID] = u
			}
		}
		s.indexCredentials()
		return s
	}
	f, err := jsutil.Follow(ctx, kv, apply, snap)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	return &Store{kv: kv, state: f, now: time.Now}, nil
}

// Changed returns a channel closed when the store's snapshot next
// changes (a write on any node): take it, read the store, then wait on it.
func (s *Store) Changed() <-chan struct{} { return s.state.Changed() }

// Stopped reports whether the store's watcher has stopped.
func (s *Store) Stopped() bool { return s.state.Closed() }

// Close stops the watcher; the last snapshot keeps authenticating.
func (s *Store) Close(context.Context) error { return s.state.Close() }

// Authenticate returns who key is, from the snapshot, without I/O. A
// malformed key is ErrBadKey; a well-formed key that opens nothing is
// ErrUnknownKey.
func (s *Store) Authenticate(key string) (Principal, error) {
	k, err := ParseKey(key)
	if err != nil {
		return Principal{}, err
	}
	u := s.state.Load().byKey[k.ID]
	if u == nil || u.Name != k.Name {
		return Principal{}, ErrUnknownKey
	}
	for _, uk := range u.Keys {
		if uk.ID == k.ID && secretMatches(k.Secret, uk.Hash) {
			if !uk.Expires.IsZero() && !s.now().Before(uk.Expires) {
				return Principal{}, ErrExpiredKey
			}
			return Principal{User: u.Name, Tenant: u.Tenant, Role: u.Role, Subjects: u.Subjects, Queues: u.Queues,
				Expires: uk.Expires}, nil
		}
	}
	return Principal{}, ErrUnknownKey
}

// Get returns the user name.
func (s *Store) Get(name string) (*User, error) {
	if u := s.state.Load().byName[name]; u != nil {
		return u, nil
	}
	return nil, semaq.NewAPIError(semaq.ErrUserNotFound, "user %q not found", name)
}

// List returns every user, by name.
func (s *Store) List() []*User {
	snap := s.state.Load()
	out := make([]*User, 0, len(snap.byName))
	for _, u := range snap.byName {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b *User) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// HasRole reports whether some user has role.
func (s *Store) HasRole(role string) bool {
	for _, u := range s.state.Load().byName {
		if u.Role == role {
			return true
		}
	}
	return false
}

// Add creates a user with one key and returns the key: the only time it
// exists outside the caller's hands.
func (s *Store) Add(ctx context.Context, r semaq.UserAddRequest) (*User, Key, error) {
	if err := Validate(r); err != nil {
		return nil, Key{}, semaq.NewAPIError(semaq.ErrBadRequest, "user: %v", err)
	}
	k, err := newKey(r.Name)
	if err != nil {
		return nil, Key{}, err
	}
	now := s.now().UTC()
	u := &User{Name: r.Name, Tenant: r.Tenant, Role: r.Role, Subjects: r.Subjects, Queues: r.Queues, RPM: r.RPM, TPM: r.TPM, Created: now,
		Keys: []UserKey{newUserKey(k, now, r.ExpiresIn)}}
	if r.Nkey != "" || r.CertSubject != "" {
		if err := s.credential(u, r); err != nil {
			return nil, Key{}, err
		}
		k = Key{} // the nkey or certificate is the user's credential
	}
	b, err := json.Marshal(u)
	if err != nil {
		return nil, Key{}, err
	}
	rev, err := s.kv.Create(ctx, u.Name, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, Key{}, semaq.NewAPIError(semaq.ErrUserExists, "user %q already exists", u.Name)
	}
	if err != nil {
		return nil, Key{}, fmt.Errorf("identity: storing user %s: %w", u.Name, err)
	}
	if _, err := s.state.WaitRev(ctx, rev); err != nil {
		return nil, Key{}, fmt.Errorf("identity: waiting for user %s: %w", u.Name, err)
	}
	return u, k, nil
}

// Rotate gives a user a new key and revokes every key it had: from the
// moment Rotate returns, the old keys authenticate no new connection on
// this node.
func (s *Store) Rotate(ctx context.Context, name string, expiresIn time.Duration) (*User, Key, error) {
	if err := checkLifetime(expiresIn); err != nil {
		return nil, Key{}, semaq.NewAPIError(semaq.ErrBadRequest, "key: %v", err)
	}
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, Key{}, semaq.NewAPIError(semaq.ErrUserNotFound, "user %q not found", name)
	}
	if err != nil {
		return nil, Key{}, fmt.Errorf("identity: reading user %s: %w", name, err)
	}
	var u User
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return nil, Key{}, fmt.Errorf("identity: user %s: %w", name, err)
	}
	k, err := newKey(name)
	if err != nil {
		return nil, Key{}, err
	}
	u.Keys = []UserKey{newUserKey(k, s.now().UTC(), expiresIn)}
	b, err := json.Marshal(&u)
	if err != nil {
		return nil, Key{}, err
	}
	// Update on the revision read: a concurrent change fails this one
	// rather than being overwritten.
	rev, err := s.kv.Update(ctx, name, b, e.Revision())
	if err != nil {
		return nil, Key{}, fmt.Errorf("identity: storing user %s: %w", name, err)
	}
	if _, err := s.state.WaitRev(ctx, rev); err != nil {
		return nil, Key{}, fmt.Errorf("identity: waiting for user %s: %w", name, err)
	}
	return &u, k, nil
}

// Remove deletes a user: from the moment Remove returns, its keys
// authenticate no new connection on this node.
func (s *Store) Remove(ctx context.Context, name string) error {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return semaq.NewAPIError(semaq.ErrUserNotFound, "user %q not found", name)
	}
	if err != nil {
		return fmt.Errorf("identity: reading user %s: %w", name, err)
	}
	if err := s.kv.Delete(ctx, name, jetstream.LastRevision(e.Revision())); err != nil {
		return fmt.Errorf("identity: removing user %s: %w", name, err)
	}
	// Delete does not return the revision it wrote: wait for the
	// snapshot to lose the user.
	for {
		ch := s.state.Changed()
		if s.state.Load().byName[name] == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("identity: waiting for the removal of %s: %w", name, ctx.Err())
		}
	}
}

// bootstrapWait bounds how long a node whose bootstrap lost the race
// waits to read the winner's admin; bootstrapRetry is how often it reads
// again meanwhile.
const (
	bootstrapWait  = 15 * time.Second
	bootstrapRetry = 50 * time.Millisecond
)

// Bootstrap makes sure an admin exists. When none does, it creates the
// user "admin" and writes its key to path with mode 0600; it reports
// whether it did. The key is never logged: the caller logs the path.
//
// Nodes of a cluster starting together on an empty store all find no
// admin; the bucket's create-if-absent lets exactly one make it. The
// others find the winner's admin in the bucket and report false: the only
// key is the one the winner wrote to its own path.
func (s *Store) Bootstrap(ctx context.Context, path string) (bool, error) {
	if s.HasRole(semaq.RoleAdmin) {
		return false, nil
	}
	_, k, err := s.Add(ctx, semaq.UserAddRequest{Name: "admin", Role: semaq.RoleAdmin})
	if errors.Is(err, semaq.ErrUserExists) {
		return false, s.bootstrappedElsewhere(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("identity: bootstrap admin: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return false, fmt.Errorf("identity: writing the admin key: %w", err)
	}
	// A file left from an earlier run keeps its mode on O_TRUNC.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return false, fmt.Errorf("identity: writing the admin key: %w", err)
	}
	if _, err := f.WriteString(k.String() + "\n"); err != nil {
		f.Close()
		return false, fmt.Errorf("identity: writing the admin key: %w", err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("identity: writing the admin key: %w", err)
	}
	return true, nil
}

// bootstrappedElsewhere checks, after a bootstrap found the name admin
// taken, that the user holding it is an admin (another node's bootstrap
// won the race). It reads the bucket rather than this node's snapshot,
// which may not show it yet; in a cluster the read may also be answered
// by a replica that has not applied the winner's write (a direct get),
// so a missing key is read again, on each change this node's snapshot
// sees and at least every bootstrapRetry, until bootstrapWait has passed.
func (s *Store) bootstrappedElsewhere(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, bootstrapWait)
	defer cancel()
	for {
		changed := s.state.Changed()
		e, err := s.kv.Get(ctx, "admin")
		if err == nil {
			var u User
			if err := json.Unmarshal(e.Value(), &u); err != nil {
				return fmt.Errorf("identity: bootstrap admin: user admin: %w", err)
			}
			if u.Role != semaq.RoleAdmin {
				return fmt.Errorf("identity: bootstrap admin: no user has the admin role and the name admin is taken by a user with role %s", u.Role)
			}
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("identity: bootstrap admin: reading the user admin another node made: %w", err)
		}
		t := time.NewTimer(bootstrapRetry)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("identity: bootstrap admin: the name admin is taken but no replica shows the user within %s: %w", bootstrapWait, ctx.Err())
		}
		t.Stop()
	}
}

// Revision is the bucket's last revision: once a node's store has
// applied it (WaitRevision), that node authenticates as every write made
// before Revision was read says.
func (s *Store) Revision(ctx context.Context) (uint64, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("identity: bucket status: %w", err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return 0, fmt.Errorf("identity: bucket status without its stream")
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// WaitRevision returns once this store's snapshot includes bucket
// revision rev.
func (s *Store) WaitRevision(ctx context.Context, rev uint64) error {
	_, err := s.state.WaitRev(ctx, rev)
	return err
}

// Tenants are the tenants of the store's users, sorted, without "".
func (s *Store) Tenants() []string {
	var out []string
	for _, u := range s.state.Load().byName {
		if u.Tenant != "" && !slices.Contains(out, u.Tenant) {
			out = append(out, u.Tenant)
		}
	}
	slices.Sort(out)
	return out
}
