package routes

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/routes/table"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The weights of adaptive splits are shared state (docs/routing.md): one
// node, the leader of the SQ_ROUTES bucket's stream, computes them and
// stores them in that bucket under weightsPrefix + the rule's name; every
// node, that one included, routes by what the bucket holds, applied by the
// rule watcher. So every node makes the same pick for a sticky key, at
// most one bucket update apart.
//
// The inputs are the cluster's, not one node's: the advisories reach every
// node (only the writer counts them), and each node reports what it
// routed to each target every interval on routedSubject, which the writer
// sums. A node that becomes the writer starts from the stored weights, so
// losing the writer's node does not reset them.

// RemotePrefix is the prefix of the subjects the nodes report what they
// routed on. It is one of the broker's own inboxes: only the broker may
// publish there or listen (docs/security.md).
const RemotePrefix = reserved.RouteRemoteInbox

const (
	routedSubject = RemotePrefix + "routed"
	// weightsPrefix keys the stored weights in the rule bucket; a rule's
	// name has no dot, so no rule is stored under such a key.
	weightsPrefix = "weights."
)

// weightsRecord is an adaptive rule's weights as stored: rounded, so an
// unchanged state is not written again.
type weightsRecord struct {
	Rev     uint64         `json:"rev"` // the rule's revision
	Node    string         `json:"node,omitempty"`
	Targets []targetRecord `json:"targets"`
}

type targetRecord struct {
	Subject  string  `json:"subject"`
	Share    float64 `json:"share"` // of the configured weight
	Health   float64 `json:"health"`
	ErrRate  float64 `json:"err_rate"`
	Lat      int64   `json:"lat,omitempty"` // ns
	LatKnown bool    `json:"lat_known,omitempty"`
	Errors   uint64  `json:"errors"`
}

// routedReport is what one node routed to each adaptive rule's targets in
// one interval.
type routedReport struct {
	Node  string                  `json:"node"`
	Rules map[string]routedCounts `json:"rules"` // by rule name
}

type routedCounts struct {
	Rev uint64   `json:"rev"`
	N   []uint64 `json:"n"` // by target, as the rule lists them
}

func round(x, unit float64) float64 { return math.Round(x/unit) * unit }

// applyWeights makes r route by rec, if rec is for r's revision and
// targets. rec goes with the weights, as their Source (storedWeights).
func applyWeights(r *table.Rule, rec *weightsRecord) {
	targets := r.Targets()
	if !r.Route().Adaptive || rec.Rev != r.Rev() || len(rec.Targets) != len(targets) {
		return
	}
	w := &table.Weights{Effective: make([]float64, len(targets)), Health: make([]semaq.RouteTargetHealth, len(targets)), Source: rec}
	for i, t := range targets {
		tr := rec.Targets[i]
		if tr.Subject != t.Subject() {
			return
		}
		w.Effective[i] = float64(t.Weight()) * max(semaq.MinAdaptiveShare, min(1, tr.Share))
		w.Health[i] = semaq.RouteTargetHealth{
			Subject: t.Subject(), Weight: int(t.Weight()), Effective: math.Round(w.Effective[i]*100) / 100,
			Health: tr.Health, ErrorRate: tr.ErrRate, AckLatency: time.Duration(tr.Lat), Errors: tr.Errors,
		}
	}
	r.SetWeights(w)
}

// storedWeights is the record r routes by, nil while it routes by its
// configured weights.
func storedWeights(r *table.Rule) *weightsRecord {
	if w := r.Weights(); w != nil {
		rec, _ := w.Source.(*weightsRecord)
		return rec
	}
	return nil
}

// applyEntry folds a stored weights entry into the model; false when e is
// not one.
func (m *model) applyWeightsEntry(e jetstream.KeyValueEntry) bool {
	name, ok := strings.CutPrefix(e.Key(), weightsPrefix)
	if !ok {
		return false
	}
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.weights, name)
		return true
	}
	var rec weightsRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		m.log.Warn("stored route weights not understood", "route", name, "err", err)
		return true
	}
	m.weights[name] = &rec
	if r := m.rules[name]; r != nil {
		applyWeights(r, &rec)
	}
	return true
}

// report sends what this node routed to adaptive targets since the last
// interval to the writer; the writer adds its own at once, so its counts
// and its errors cover the same interval (the others' come a moment
// later, in the next one).
func (h *health) report(tab *table.Table, writer bool) {
	rep := map[string]routedCounts{}
	live := map[*table.Target]bool{}
	for _, r := range tab.Rules() {
		if !r.Route().Adaptive {
			continue
		}
		rc := routedCounts{Rev: r.Rev(), N: make([]uint64, len(r.Targets()))}
		some := false
		for i, t := range r.Targets() {
			live[t] = true
			cur := t.Matched()
			prev, seen := h.last[t]
			h.last[t] = cur
			if seen && cur > prev {
				rc.N[i], some = cur-prev, true
			}
		}
		if some {
			rep[r.Name()] = rc
		}
	}
	for t := range h.last {
		if !live[t] {
			delete(h.last, t)
		}
	}
	if len(rep) == 0 {
		return
	}
	if writer {
		h.addRouted(rep)
		return
	}
	data, err := json.Marshal(routedReport{Node: h.rt.deps.Node, Rules: rep})
	if err == nil {
		_ = h.rt.deps.Conn.Publish(routedSubject, data)
	}
}

// onRouted sums the nodes' reports, on the writer.
func (h *health) onRouted(m *nats.Msg) {
	if !h.writer.Load() {
		return
	}
	var rep routedReport
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Node == h.rt.deps.Node {
		return
	}
	h.addRouted(rep.Rules)
}

// addRouted adds a node's report to the interval's sums.
func (h *health) addRouted(rep map[string]routedCounts) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, rc := range rep {
		sum := h.routed[name]
		if sum == nil || sum.Rev != rc.Rev {
			if sum != nil && sum.Rev > rc.Rev {
				continue // a report of a rule since replaced
			}
			sum = &routedCounts{Rev: rc.Rev, N: make([]uint64, len(rc.N))}
			h.routed[name] = sum
		}
		for i := range min(len(sum.N), len(rc.N)) {
			sum.N[i] += rc.N[i]
		}
	}
}

// leads reports whether this node writes the weights: it leads the rule
// bucket's stream, or runs alone. When JetStream does not answer, the
// node keeps its role.
func (h *health) leads() bool {
	if !h.rt.deps.Clustered {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthInterval/2)
	defer cancel()
	if h.bucket == nil {
		st, err := h.rt.deps.JS.Stream(ctx, "KV_"+reserved.RouteBucket)
		if err != nil {
			return h.writer.Load()
		}
		h.bucket = st
	}
	info, err := h.bucket.Info(ctx)
	if err != nil {
		return h.writer.Load()
	}
	return info.Cluster == nil || info.Cluster.Leader == h.rt.deps.Node
}

// write stores the records that changed since last written, and deletes
// the stored weights of rules that are gone. The first write of a new
// writer finds what the earlier one left.
func (h *health) write(recs map[string]*weightsRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), healthInterval)
	defer cancel()
	kv := h.rt.kv
	if h.written == nil {
		h.written = map[string]string{}
		if lister, err := kv.ListKeysFiltered(ctx, weightsPrefix+">"); err == nil {
			for k := range lister.Keys() {
				h.written[strings.TrimPrefix(k, weightsPrefix)] = ""
			}
		}
	}
	for name, rec := range recs {
		data, err := json.Marshal(rec)
		if err != nil || string(data) == h.written[name] {
			continue
		}
		if _, err := kv.Put(ctx, weightsPrefix+name, data); err != nil {
			h.rt.log.Debug("storing route weights", "route", name, "err", err)
			continue
		}
		h.written[name] = string(data)
	}
	for name := range h.written {
		if recs[name] == nil {
			if err := kv.Delete(ctx, weightsPrefix+name); err == nil {
				delete(h.written, name)
			}
		}
	}
}
