// Package classes keeps the hardware classes of work queues
// (docs/queues.md, Hardware classes) and the cluster-wide count of their
// held requests.
//
// A class is replicated configuration: one record per class in the KV
// bucket SQ_CLASSES, changed by admins through $SQ.API.CLASS and watched
// by every node, which keeps the table in memory (Class).
//
// A class with a max concurrency N has N slots, the keys <class>.0 to
// <class>.N-1 of the KV bucket SQ_CLASS_SLOTS, replicated like the queues'
// lease stores. A dispatcher hands a job of the class to a worker only
// once it holds a slot for it (Acquire: a create of a key that does not
// exist, or a compare-and-set of one whose lease ended, both decided by
// the bucket stream's leader, so two dispatchers on different nodes never
// get one slot); the slot names the queue, the job and the end of its
// lease. It gives the slot back when the lease ends (ack, nak, term,
// cancel, expiry: Release, a delete at the revision it holds, so it never
// frees a slot another took over). At no instant are more than N keys
// held, so no more than N leases of the class: whatever queue, whichever
// node, and across a failover, where the dispatcher that takes the queue
// over finds its held jobs' slots in the bucket (Owned). A slot whose
// lease ended more than SlotGrace ago and that nobody released (its
// dispatcher's node went away) is taken over by the next Acquire.
//
// Every node watches the slots too: Held is the count it last heard, which
// dispatchers use to skip a full class without asking the bucket.
package classes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/wallclock"
	"github.com/semaq/semaq/semaq"
)

// SlotGrace is how long past its lease's end a slot nobody released is
// kept before another dispatcher may take it: room for the nodes' clocks
// to differ and for a release in flight.
const SlotGrace = 2 * time.Second

// ErrFull is Acquire's answer when every slot of the class is held.
var ErrFull = errors.New("classes: every slot of the class is held")

// Deps is what the class table uses of the node.
type Deps struct {
	// Log gets class changes; nil discards.
	Log *slog.Logger
	// JS makes and writes the buckets: the internal connection's.
	JS jetstream.JetStream
	// Replicas of both buckets (0 means 1).
	Replicas int
	// Audit records class changes; nil records nothing.
	Audit api.AuditFunc
	// Gate runs the watchers and the releaser; Close closes it. Required.
	Gate *subsystem.Gate
	// Applied, when set, is called after a class change is in effect on
	// this node and before it is answered, with the bucket revision
	// holding it: in a cluster the node waits there for the others to
	// apply it (WaitApplied on theirs).
	Applied func(ctx context.Context, rev uint64)
}

// Slot is what a slot record says: the job holding it and the end of its
// lease.
type Slot struct {
	Queue string `json:"q"`
	Seq   uint64 `json:"s"`
	Until int64  `json:"u"` // Unix ms
}

// SlotRef is a slot held: its key and the revision it was written at.
type SlotRef struct {
	Class string
	Key   string
	Rev   uint64
}

type def struct {
	semaq.QueueClass
	rev uint64
}

type held struct {
	Slot
	rev uint64
}

type liveCount struct {
	n  int
	at int64 // Unix ms
}

// liveFor is how long Held's count of a class is reused: dispatchers ask
// it for every candidate of a pick.
const liveFor = 50 // ms

// Classes is the class table and the slots' view. Safe for concurrent use;
// its lock is a leaf (dispatchers call Class and Held with theirs held).
type Classes struct {
	deps  Deps
	log   *slog.Logger
	defs  jetstream.KeyValue
	slots jetstream.KeyValue

	mu         sync.Mutex
	classes    map[string]def
	appliedRev uint64                     // the defs revision last applied
	held       map[string]map[string]held // class -> key -> slot
	// live caches each class's count of slots whose lease runs (Held),
	// for liveFor; a change of the class's slots drops it.
	live map[string]liveCount

	relMu    sync.Mutex
	releases []SlotRef
	kick     chan struct{}
}

// Open makes (or adopts) the buckets, reads them and starts watching.
func Open(ctx context.Context, deps Deps) (*Classes, error) {
	if deps.JS == nil || deps.Gate == nil {
		return nil, errors.New("classes: Deps.JS and Deps.Gate are required")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	c := &Classes{deps: deps, log: deps.Log, classes: map[string]def{}, held: map[string]map[string]held{},
		live: map[string]liveCount{}, kick: make(chan struct{}, 1)}
	var err error
	if c.defs, err = bucket(ctx, deps, reserved.ClassBucket, 5, "SemaQ hardware classes of work queues"); err != nil {
		return nil, err
	}
	if c.slots, err = bucket(ctx, deps, reserved.ClassSlotBucket, 1, "SemaQ held slots of capped classes"); err != nil {
		return nil, err
	}
	for _, w := range []struct {
		kv    jetstream.KeyValue
		apply func(jetstream.KeyValueEntry)
	}{{c.defs, c.applyDef}, {c.slots, c.applySlot}} {
		if err := c.watch(ctx, w.kv, w.apply); err != nil {
			return nil, err
		}
	}
	if !deps.Gate.Go("releaser", c.releaser) {
		return nil, errors.New("classes: the node is shutting down")
	}
	return c, nil
}

// bucket opens (or makes) one of the buckets: every node at its start,
// never lowering the replicas a grown cluster gave it (jsutil.Bucket).
func bucket(ctx context.Context, deps Deps, name string, history uint8, desc string) (jetstream.KeyValue, error) {
	kv, err := jsutil.Bucket(ctx, deps.JS, jetstream.KeyValueConfig{
		Bucket: name, Description: desc, History: history, Replicas: max(deps.Replicas, 1), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("classes: bucket %s: %w", name, err)
	}
	return kv, nil
}

// watch applies kv's records, all of them before it returns, then every
// change until the gate closes.
func (c *Classes) watch(ctx context.Context, kv jetstream.KeyValue, apply func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchAll(c.deps.Gate.Context())
	if err != nil {
		return fmt.Errorf("classes: watching %s: %w", kv.Bucket(), err)
	}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				ok := c.deps.Gate.Go("watch-"+kv.Bucket(), func(gctx context.Context) {
					defer func() { _ = w.Stop() }()
					for {
						select {
						case e, ok := <-w.Updates():
							if !ok {
								return
							}
							if e != nil {
								apply(e)
							}
						case <-gctx.Done():
							return
						}
					}
				})
				if !ok {
					_ = w.Stop()
					return errors.New("classes: the node is shutting down")
				}
				return nil
			}
			apply(e)
		case <-ctx.Done():
			_ = w.Stop()
			return fmt.Errorf("classes: reading %s: %w", kv.Bucket(), ctx.Err())
		}
	}
}

func (c *Classes) applyDef(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.appliedRev = max(c.appliedRev, e.Revision())
	if e.Operation() != jetstream.KeyValuePut {
		delete(c.classes, e.Key())
		return
	}
	var qc semaq.QueueClass
	if err := json.Unmarshal(e.Value(), &qc); err != nil || qc.Check() != nil {
		c.log.Warn("class record ignored: not a valid class", "key", e.Key(), "err", err)
		return
	}
	c.classes[e.Key()] = def{qc, e.Revision()}
}

func (c *Classes) applySlot(e jetstream.KeyValueEntry) {
	class, _, ok := strings.Cut(e.Key(), ".")
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.held[class]
	if e.Operation() != jetstream.KeyValuePut {
		delete(m, e.Key())
	} else {
		var s Slot
		if json.Unmarshal(e.Value(), &s) != nil {
			return
		}
		if m == nil {
			m = map[string]held{}
			c.held[class] = m
		}
		m[e.Key()] = held{s, e.Revision()}
	}
	delete(c.live, class)
}

// Class is the class named name.
func (c *Classes) Class(name string) (semaq.QueueClass, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.classes[name]
	return d.QueueClass, ok
}

// Held is how many slots of class are held, as this node last heard:
// those whose lease ended SlotGrace ago are free for the next Acquire.
func (c *Classes) Held(class string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heldLocked(class, wallclock.Now().UnixMilli())
}

func (c *Classes) heldLocked(class string, now int64) int {
	if lc, ok := c.live[class]; ok && now-lc.at < liveFor {
		return lc.n
	}
	n := 0
	for _, h := range c.held[class] {
		if h.Until+SlotGrace.Milliseconds() >= now {
			n++
		}
	}
	c.live[class] = liveCount{n, now}
	return n
}

// Acquire takes a slot of class, whose cap is max, for s: a free one, or
// one whose lease ended SlotGrace ago. ErrFull when there is none.
func (c *Classes) Acquire(ctx context.Context, class string, max int, s Slot) (SlotRef, error) {
	val, _ := json.Marshal(s)
	now := wallclock.Now().UnixMilli()
	type cand struct {
		key string
		rev uint64 // 0: free
	}
	var free, stale []cand
	c.mu.Lock()
	m := c.held[class]
	for i := range max {
		key := class + "." + strconv.Itoa(i)
		switch h, ok := m[key]; {
		case !ok:
			free = append(free, cand{key, 0})
		case h.Until+SlotGrace.Milliseconds() < now:
			stale = append(stale, cand{key, h.rev})
		}
	}
	c.mu.Unlock()
	for _, k := range append(free, stale...) {
		var (
			rev uint64
			err error
		)
		if k.rev == 0 {
			rev, err = c.slots.Create(ctx, k.key, val)
		} else {
			rev, err = c.slots.Update(ctx, k.key, val, k.rev)
		}
		switch {
		case err == nil:
			c.applyHeld(class, k.key, s, rev)
			return SlotRef{Class: class, Key: k.key, Rev: rev}, nil
		case errors.Is(err, jetstream.ErrKeyExists) || isWrongSeq(err):
			continue // another dispatcher was first
		default:
			return SlotRef{}, fmt.Errorf("class %s: taking a slot: %w", class, err)
		}
	}
	return SlotRef{}, ErrFull
}

// applyHeld records a slot this node wrote before its watch tells it.
func (c *Classes) applyHeld(class, key string, s Slot, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.held[class]
	if m == nil {
		m = map[string]held{}
		c.held[class] = m
	}
	if h, ok := m[key]; !ok || h.rev < rev {
		m[key] = held{s, rev}
		delete(c.live, class)
	}
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Extend records a new end of the lease holding ref; the new revision.
func (c *Classes) Extend(ctx context.Context, ref SlotRef, s Slot) (uint64, error) {
	val, _ := json.Marshal(s)
	rev, err := c.slots.Update(ctx, ref.Key, val, ref.Rev)
	if err == nil {
		c.applyHeld(ref.Class, ref.Key, s, rev)
	}
	return rev, err
}

// Release gives ref back, in the background: a delete at its revision,
// so a slot another dispatcher took over is left alone. It does not
// block (dispatchers call it with their lock held).
func (c *Classes) Release(ref SlotRef) {
	c.relMu.Lock()
	c.releases = append(c.releases, ref)
	c.relMu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// releaser deletes the slots given back, in order.
func (c *Classes) releaser(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		for {
			c.relMu.Lock()
			refs := c.releases
			c.releases = nil
			c.relMu.Unlock()
			if len(refs) == 0 {
				break
			}
			for _, ref := range refs {
				rctx, cancel := context.WithTimeout(ctx, api.Timeout)
				err := c.slots.Delete(rctx, ref.Key, jetstream.LastRevision(ref.Rev))
				cancel()
				if err != nil && !isWrongSeq(err) && ctx.Err() == nil {
					// Its lease's end frees it for the next Acquire.
					c.log.Warn("class slot not released; it frees when its lease ends", "slot", ref.Key, "err", err)
				}
			}
		}
	}
}

// Owned are the slots held for jobs of queue, by sequence: those of the
// jobs a dispatcher taking the queue over restores as held.
func (c *Classes) Owned(queue string) map[uint64]SlotRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint64]SlotRef{}
	for class, m := range c.held {
		for key, h := range m {
			if h.Queue == queue {
				out[h.Seq] = SlotRef{Class: class, Key: key, Rev: h.rev}
			}
		}
	}
	return out
}

// Stats are each class's held slots and cap, by name.
func (c *Classes) Stats() []semaq.ClassInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]semaq.ClassInfo, 0, len(c.classes))
	now := wallclock.Now().UnixMilli()
	for _, d := range c.classes {
		out = append(out, semaq.ClassInfo{QueueClass: d.QueueClass, Revision: d.rev, Held: c.heldLocked(d.Name, now)})
	}
	slices.SortFunc(out, func(a, b semaq.ClassInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Handlers serve $SQ.API.CLASS.*: admins only (their NATS permissions;
// no other role is granted the family).
func (c *Classes) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIClassAdd:    api.Op(c.log, "class add", c.add, nil),
		semaq.APIClassDelete: api.Op(c.log, "class delete", c.remove, nil),
		semaq.APIClassList:   api.Op(c.log, "class list", c.list, nil),
	}
}

func (c *Classes) add(ctx context.Context, req *semaq.ClassAddRequest) (out any, err error) {
	defer c.deps.Audit(ctx, semaq.AuditOpClassAdd, req.Name)(&out, &err)
	qc := req.QueueClass
	if err := qc.Check(); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadClass, "%v", err)
	}
	c.mu.Lock()
	_, exists := c.classes[qc.Name]
	n := len(c.classes)
	c.mu.Unlock()
	if !exists && n >= semaq.MaxClasses {
		return nil, semaq.NewAPIError(semaq.ErrBadClass, "class %s: the cluster keeps at most %d classes; remove one first", qc.Name, semaq.MaxClasses)
	}
	val, _ := json.Marshal(qc)
	var rev uint64
	if req.Replace {
		rev, err = c.defs.Put(ctx, qc.Name, val)
	} else {
		rev, err = c.defs.Create(ctx, qc.Name, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, semaq.NewAPIError(semaq.ErrClassExists, "class %s already exists; remove it first or add it with replace", qc.Name)
		}
	}
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "class %s: storing: %v", qc.Name, err)
	}
	if err := c.waitApplied(ctx, rev); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "class %s stored but not yet in effect on this node: %v", qc.Name, err)
	}
	c.applied(ctx, rev)
	c.log.Info("class added", "class", qc.Name, "revision", rev)
	return semaq.ClassInfo{QueueClass: qc, Revision: rev, Held: c.Held(qc.Name)}, nil
}

func (c *Classes) remove(ctx context.Context, req *semaq.ClassNameRequest) (out any, err error) {
	defer c.deps.Audit(ctx, semaq.AuditOpClassDelete, req.Name)(&out, &err)
	if _, ok := c.Class(req.Name); !ok {
		return nil, semaq.NewAPIError(semaq.ErrClassNotFound, "class %s not found", req.Name)
	}
	if err := c.defs.Delete(ctx, req.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "class %s: deleting: %v", req.Name, err)
	}
	if err := c.waitGone(ctx, req.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "class %s deleted but not yet on this node: %v", req.Name, err)
	}
	c.mu.Lock()
	rev := c.appliedRev
	c.mu.Unlock()
	c.applied(ctx, rev) // at least the delete's
	c.log.Info("class removed", "class", req.Name)
	return semaq.ClassDeleteResponse{Deleted: true}, nil
}

func (c *Classes) list(context.Context, *struct{}) (any, error) {
	return semaq.ClassListResponse{Classes: c.Stats()}, nil
}

// applied tells the cluster of a change this node applied (Deps.Applied).
func (c *Classes) applied(ctx context.Context, rev uint64) {
	if c.deps.Applied != nil {
		c.deps.Applied(ctx, rev)
	}
}

// WaitApplied waits until this node applies revision rev of the classes
// (another node's change, the cluster sync asks).
func (c *Classes) WaitApplied(ctx context.Context, rev uint64) error { return c.waitApplied(ctx, rev) }

// waitApplied waits until this node's watch has applied rev.
func (c *Classes) waitApplied(ctx context.Context, rev uint64) error {
	return c.wait(ctx, func() bool { return c.appliedRev >= rev })
}

// waitGone waits until this node's table no longer has class name.
func (c *Classes) waitGone(ctx context.Context, name string) error {
	return c.wait(ctx, func() bool { _, ok := c.classes[name]; return !ok })
}

// wait waits until done, called with mu held, is true.
func (c *Classes) wait(ctx context.Context, done func() bool) error {
	for {
		c.mu.Lock()
		ok := done()
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// AuditRead is a class as audit records show it, nil when there is none.
func (c *Classes) AuditRead(_ context.Context, name string) any {
	if qc, ok := c.Class(name); ok {
		return qc
	}
	return nil
}

// Close stops the watchers and the releaser; slots still to release free
// when their leases end.
func (c *Classes) Close(ctx context.Context) error {
	return c.deps.Gate.Close(ctx)
}
