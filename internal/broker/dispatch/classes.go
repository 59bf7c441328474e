package dispatch

// Hardware classes (docs/queues.md): a request's class and labels, read
// when it is indexed, and the cap of a class, which holds across the
// cluster.
//
// A request is in the queue's class when the queue has one
// (QueueConfig.Class), else in the class its AI-Class names. Its required
// labels are its AI-Require with the class's over them (a request cannot
// steer its class's work off the class's workers), its preferred labels
// the class's with its AI-Prefer over them; the scheduler places by them
// (sched/labels.go).
//
// A capped class's leases are counted by its slots (Deps.Classes,
// internal/broker/classes): a job of the class is handed out only once
// the dispatcher holds a slot for it, taken in ship before its lease is
// recorded, and the slot is given back where its lease ends
// (unbindLease). Under mu the dispatcher skips a class whose slots look
// all held (what the node last heard, plus those it is taking now), so it
// rarely asks for a slot it cannot get; when it does, the job goes back to
// the queue as if never handed out.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/semaq"
)

// Classes is the cluster's hardware classes and their slots. Class, Held,
// Release and Owned take only a leaf lock (the dispatcher calls them with
// its own held); Acquire and Extend block on JetStream.
type Classes interface {
	// Class is the class named name.
	Class(name string) (semaq.QueueClass, bool)
	// Held is how many slots of class are held, as the node last heard.
	Held(class string) int
	// Acquire takes a slot of class, whose cap is max, for s; ErrClassFull
	// when every slot is held.
	Acquire(ctx context.Context, class string, max int, s Slot) (SlotRef, error)
	// Extend records a new end of the lease holding ref: its new revision.
	Extend(ctx context.Context, ref SlotRef, s Slot) (uint64, error)
	// Release gives ref back, in the background.
	Release(ref SlotRef)
	// Owned are the slots held for jobs of queue, by sequence.
	Owned(queue string) map[uint64]SlotRef
}

// Slot is what a slot says: the job that holds it and its lease's end
// (Unix ms).
type Slot struct {
	Queue string
	Seq   uint64
	Until int64
}

// SlotRef is a slot held: its class, key and revision.
type SlotRef struct {
	Class string
	Key   string
	Rev   uint64
}

// ErrClassFull is Classes.Acquire's answer when a class has no free slot.
var ErrClassFull = errors.New("dispatch: every slot of the class is held")

// classState is the dispatcher's account of its class slots. mu guards it.
type classState struct {
	// slots are the slots held for jobs, by sequence; taking, the slots
	// being taken now, by class; owned, the slots the store named for this
	// queue at start, until the consumer has caught up.
	slots   map[uint64]SlotRef
	taking  map[string]int
	pending map[uint64]string // picked, not yet in a shipment: the class
	owned   map[uint64]SlotRef
}

// classOf reads a request's class and labels from its headers. mu is held
// (or the job is not yet shared).
func (d *Dispatcher) classOf(j *sched.Job, hdr nats.Header) {
	j.Class = d.cfg.Class
	if j.Class == "" {
		j.Class = strings.Clone(hdr.Get(semaq.HdrClass))
	}
	req, pref := labelsIn(hdr, semaq.HdrRequire), labelsIn(hdr, semaq.HdrPrefer)
	if j.Class != "" && d.deps.Classes != nil {
		if qc, ok := d.deps.Classes.Class(j.Class); ok {
			req = merged(req, qc.Require)
			pref = merged(qc.Prefer, pref)
		}
	}
	j.Require, j.Prefer = req, pref
}

// labelsIn reads the label set of header name (the ingress checked it);
// nil when there is none.
func labelsIn(hdr nats.Header, name string) map[string]string {
	v := hdr.Get(name)
	if v == "" {
		return nil
	}
	l, _ := semaq.ParseLabels(v)
	return l
}

// merged is a with b's labels over it; nil when both are empty.
func merged(a, b map[string]string) map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := maps.Clone(a)
	if out == nil {
		out = make(map[string]string, len(b))
	}
	maps.Copy(out, b)
	return out
}

// classCap is the cap of class, 0 for none (or no such class).
func (d *Dispatcher) classCap(class string) int {
	if class == "" || d.deps.Classes == nil {
		return 0
	}
	qc, ok := d.deps.Classes.Class(class)
	if !ok {
		return 0
	}
	return qc.MaxConcurrency
}

// capped is the scheduler's Config.Capped: j's class has no slot to
// spare. mu is held.
func (d *Dispatcher) capped(j *sched.Job) bool {
	n := d.classCap(j.Class)
	return n > 0 && d.deps.Classes.Held(j.Class)+d.classes.taking[j.Class] >= n
}

// picked is the scheduler's Config.Picked: a slot is to be taken for j.
// mu is held.
func (d *Dispatcher) picked(j *sched.Job) {
	if d.classCap(j.Class) > 0 {
		if d.classes.taking == nil {
			d.classes.taking = make(map[string]int)
			d.classes.pending = make(map[uint64]string)
		}
		d.classes.taking[j.Class]++
		d.classes.pending[j.Seq] = j.Class
	}
}

// takeSlots takes a slot for each job of the shipments whose class is
// capped, before their leases are recorded. A job that gets none goes back
// to the queue, taken out of its shipment; a fetch left with no job hears
// that there is none. mu is not held.
func (d *Dispatcher) takeSlots(ctx context.Context, ships []*shipment) []*shipment {
	if d.deps.Classes == nil {
		return ships
	}
	type took struct {
		sj  shipJob
		ref SlotRef
		err error
	}
	var (
		all []took
		// Once JetStream fails, or a class is full, the rest of the batch
		// is not asked for: a slot bucket electing a leader must not hold
		// the dispatcher for a timeout per job.
		broken error
		full   = map[string]bool{}
	)
	for _, sh := range ships {
		for _, sj := range sh.jobs {
			if sj.class == "" {
				continue
			}
			t := took{sj: sj, ref: SlotRef{}, err: nil}
			switch n := d.classCap(sj.class); {
			case n == 0: // the class lost its cap meanwhile
			case broken != nil:
				t.err = broken
			case full[sj.class]:
				t.err = ErrClassFull
			default:
				t.ref, t.err = d.deps.Classes.Acquire(ctx, sj.class, n, Slot{Queue: d.name, Seq: sj.seq, Until: sj.rec.Until})
				if errors.Is(t.err, ErrClassFull) {
					full[sj.class] = true
				} else if t.err != nil {
					broken = t.err
				}
			}
			all = append(all, t)
		}
	}
	if len(all) == 0 {
		return ships
	}
	lost := map[uint64]bool{}
	var out []*outMsg
	d.mu.Lock()
	for _, t := range all {
		d.classes.taking[t.sj.class]--
		j := t.sj.j
		still := j.State == sched.JobHeld && j.Lease == t.sj.lease
		switch {
		case t.err == nil && t.ref.Key == "":
		case t.err == nil && still:
			if d.classes.slots == nil {
				d.classes.slots = make(map[uint64]SlotRef)
			}
			d.classes.slots[j.Seq] = t.ref
		case t.err == nil:
			d.deps.Classes.Release(t.ref) // cancelled meanwhile
		default:
			if !errors.Is(t.err, ErrClassFull) {
				d.log.Warn("class slot not taken; the request goes back to the queue", "class", t.sj.class, "seq", j.Seq, "err", t.err)
			}
			lost[t.sj.seq] = true
			if still {
				j.Deliveries--
				d.sched.Requeue(j)
			}
		}
	}
	if len(lost) == 0 {
		d.mu.Unlock()
		return ships
	}
	keep := ships[:0]
	for _, sh := range ships {
		jobs := slices.DeleteFunc(sh.jobs, func(sj shipJob) bool { return lost[sj.seq] })
		if len(jobs) == 0 {
			out = append(out, endOfBatch(sh.reply, 408, 0, "no requests: their class's slots are all held"))
			continue
		}
		sh.jobs = jobs
		keep = append(keep, sh)
	}
	d.publishDepth(usage{})
	d.mu.Unlock()
	d.send(out)
	return keep
}

// releaseSlot gives back the slot j's lease held, if any. mu is held.
func (d *Dispatcher) releaseSlot(j *sched.Job) {
	if ref, ok := d.classes.slots[j.Seq]; ok {
		delete(d.classes.slots, j.Seq)
		d.deps.Classes.Release(ref)
	}
}

// extendSlot records job seq's new lease end (Unix ms) in its slot. mu is
// not held.
func (d *Dispatcher) extendSlot(seq uint64, until int64) {
	d.mu.Lock()
	ref, ok := d.classes.slots[seq]
	d.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseTimeout)
	rev, err := d.deps.Classes.Extend(ctx, ref, Slot{Queue: d.name, Seq: seq, Until: until})
	cancel()
	if err != nil {
		d.log.Warn("class slot not extended; it may be taken over once the lease it names ends", "slot", ref.Key, "err", err)
		return
	}
	d.mu.Lock()
	if cur, ok := d.classes.slots[seq]; ok && cur.Key == ref.Key {
		cur.Rev = max(cur.Rev, rev)
		d.classes.slots[seq] = cur
	}
	d.mu.Unlock()
}

// loadOwned reads the slots held for this queue's jobs, at start.
func (d *Dispatcher) loadOwned() {
	if d.deps.Classes != nil {
		d.classes.owned = d.deps.Classes.Owned(d.name)
	}
}

// adoptSlot binds a restored held job to the slot held for it. mu is held.
func (d *Dispatcher) adoptSlot(j *sched.Job) {
	if ref, ok := d.classes.owned[j.Seq]; ok {
		delete(d.classes.owned, j.Seq)
		if d.classes.slots == nil {
			d.classes.slots = make(map[uint64]SlotRef)
		}
		d.classes.slots[j.Seq] = ref
	}
}

// dropOwned gives back the slots held for jobs of this queue that are no
// longer held, once the consumer has caught up. mu is held.
func (d *Dispatcher) dropOwned() {
	for seq, ref := range d.classes.owned {
		if _, bound := d.classes.slots[seq]; !bound {
			d.deps.Classes.Release(ref)
		}
	}
	d.classes.owned = nil
}

// classStats is what the queue holds of each class. mu is held.
func (d *Dispatcher) classStats() []semaq.ClassStat {
	by := map[string]*semaq.ClassStat{}
	d.sched.Each(func(j *sched.Job) {
		if j.Class == "" {
			return
		}
		st := by[j.Class]
		if st == nil {
			st = &semaq.ClassStat{Class: j.Class}
			by[j.Class] = st
		}
		switch j.State {
		case sched.JobHeld:
			st.Held++
		case sched.JobQueued, sched.JobDelayed:
			st.Queued++
		}
	})
	if d.cfg.Class != "" && by[d.cfg.Class] == nil {
		by[d.cfg.Class] = &semaq.ClassStat{Class: d.cfg.Class}
	}
	out := make([]semaq.ClassStat, 0, len(by))
	for _, name := range slices.Sorted(maps.Keys(by)) {
		st := by[name]
		st.Max = d.classCap(name)
		if d.deps.Classes != nil {
			st.ClusterHeld = d.deps.Classes.Held(name)
		}
		out = append(out, *st)
	}
	return out
}
