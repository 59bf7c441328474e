package tokens

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Relays and bindings across a cluster. Each node's relay takes the
// records of the writers connected to that node: the node maps
// $SQ.TW.<id>.… to NodeWritePrefix(node)+"<id>.…" in its own account as a
// writer's record enters it (directly, or through a tenant account's
// import), and its relay listens there only. (A queue group across the
// cluster would not do: the NATS server hands a client's message to any
// member, here or on another node, so one writer's records would reach
// several relays, each knowing a part of the stream.) So a writer's
// records reach one relay in order, which need not be on the node whose
// dispatcher handed the job out and bound its stream. So a dispatcher's BindJob is told to every
// node on BindSubject, on the broker's own connections: a subject no
// client may publish or subscribe to (the broker's inboxes,
// internal/broker/permissions.go), since it carries the lease.
//
// A notice may reach another node after the worker's first records (the
// job travels on another connection): the worker's SDK names the job's
// tenant on record 1, so its records are claimed with the lease and the
// tenant the notice then confirms (bind keeps such a claim); a writer that
// claimed the id with another key or tenant is purged, as on one node.

// BindSubject carries the job bindings of one node to the others.
const BindSubject = reserved.TokenBindSubject

// NodeWritePrefixAll matches every node's relay subjects.
const NodeWritePrefixAll = "$SQ.TWN."

// NodeWritePrefix starts the subjects the writers connected to node reach
// its relay on ($SQ.TWN.<node>.): the node maps semaq.TokenWritePrefix
// there (Server: account mapping). node is a subject token.
func NodeWritePrefix(node string) string { return NodeWritePrefixAll + node + "." }

// bindNotice is one binding on BindSubject.
type bindNotice struct {
	Node   string `json:"n"`
	ID     string `json:"i"`
	Tenant string `json:"t,omitempty"`
	Key    string `json:"k"`
	// Where the answer is chained (api.AnswerChain), if it is.
	ChainSubject string `json:"cs,omitempty"`
	ChainSession string `json:"css,omitempty"`
}

// shareBind tells the other nodes of a binding made here. It does not
// block: the dispatcher calls BindJob under its lock.
func (ts *Store) shareBind(id, tenant, key string, ch api.AnswerChain) {
	if !ts.share {
		return
	}
	b, err := json.Marshal(bindNotice{Node: ts.node, ID: id, Tenant: tenant, Key: key, ChainSubject: ch.Subject, ChainSession: ch.Session})
	if err == nil {
		err = ts.nc.Publish(BindSubject, b)
	}
	if err != nil {
		ts.debug("token stream: telling the other nodes of a binding", "id", id, "err", err)
	}
}

// startBinds listens for the other nodes' bindings.
func (ts *Store) startBinds() error {
	if !ts.share {
		return nil
	}
	sub, err := ts.nc.Subscribe(BindSubject, ts.bound)
	if err != nil {
		return fmt.Errorf("broker: token bindings: %w", err)
	}
	ts.mu.Lock()
	ts.bindSub = sub
	ts.mu.Unlock()
	return nil
}

// bound applies another node's binding here.
func (ts *Store) bound(m *nats.Msg) {
	var n bindNotice
	if err := json.Unmarshal(m.Data, &n); err != nil || n.Node == ts.node ||
		semaq.CheckRequestID(n.ID) != nil || semaq.CheckTokenKey(n.Key) != nil {
		return
	}
	var ch api.AnswerChain
	if n.ChainSubject != "" && n.ChainSession != "" {
		ch = api.AnswerChain{Subject: n.ChainSubject, Session: n.ChainSession, Tenant: n.Tenant}
	}
	ts.bind(n.ID, n.Tenant, n.Key, ch)
}

// stopBinds stops listening.
func (ts *Store) stopBinds() {
	ts.mu.Lock()
	sub := ts.bindSub
	ts.bindSub = nil
	ts.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}

// Records that wait for a binding: at most maxWaiting per request id, for
// at most bindWait. A binding that comes checks them against itself
// (admitWaiting); past the wait they are refused as a foreign writer's.
const (
	maxWaiting = 256
	bindWait   = 5 * time.Second
)

// waiting is a record that came before the binding that would admit it.
type waiting struct {
	m, out *nats.Msg
	key    string
	tenant string
	end    bool
	rec    *semaq.TokenChunk
}

// awaitBind holds w when, in a cluster, it carries another key than the
// unbound claim of its request id: its writer may be the job's holder, on
// this node before the job's binding. mu is held. It reports whether it
// held w.
func (ts *Store) awaitBind(id string, w *waiting) bool {
	c := ts.claims[id]
	if !ts.share || c == nil || c.bound || c.legacy || c.purging || len(c.waiting) >= maxWaiting ||
		subtle.ConstantTimeCompare([]byte(c.key), []byte(w.key)) == 1 {
		return false
	}
	if len(c.waiting) == 0 {
		ts.work.Add(1) // under mu while open: Close waits for it
		time.AfterFunc(bindWait, func() { defer ts.work.Done(); ts.expireWaiting(id, c) })
	}
	c.waiting = append(c.waiting, w)
	return true
}

// admitWaiting checks the records that waited for c's binding, in the
// order they came: admitted ones are held for the purge of the foreign
// writer's, the others refused. mu is held.
func (ts *Store) admitWaiting(id string, c *claim, ws []*waiting) {
	for _, w := range ws {
		e := ts.admit(id, w.tenant, w.key, w.end, w.rec, len(w.m.Data))
		if e != nil {
			ts.refuse(w.m, e)
			continue
		}
		w.out.Subject = storeSubject(c.tenant, id, w.end)
		msgs, final := ts.filtered(id, c, w.rec, w.end, w.out)
		markAnswer(c, msgs)
		c.held = append(c.held, msgs...)
		if final != nil {
			ts.work.Add(1)
			if !ts.gate.Go("ended", func(context.Context) { defer ts.work.Done(); ts.ended(id, final) }) {
				ts.work.Done()
			}
		}
		if w.end {
			ts.work.Add(1)
			if !ts.gate.Go("ended", func(context.Context) { defer ts.work.Done(); ts.ended(id, w.m) }) {
				ts.work.Done()
			}
		}
	}
}

// expireWaiting refuses what still waits for a binding after bindWait.
func (ts *Store) expireWaiting(id string, c *claim) {
	ts.mu.Lock()
	ws := c.waiting
	c.waiting = nil
	ts.mu.Unlock()
	for _, w := range ws {
		ts.refuse(w.m, semaq.NewAPIError(semaq.ErrTokenWriter, "token stream %s belongs to another writer", id))
	}
}
