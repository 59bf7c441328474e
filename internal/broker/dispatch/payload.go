package dispatch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The dispatcher indexes requests without their payloads (the stream
// consumer delivers headers only) and reads a request back from the stream
// when it hands it out or dead-letters it: a JetStream direct get on the
// dispatcher's internal connection. Requests close together in the stream
// (a batch picked in arrival order, the common case) are read by one batch
// get of the run they span; the others, and any a batch did not bring, by
// one get each. The gets of a batch are all in flight at once, so a batch
// costs about one round trip.

// payloadTimeout bounds the reads of one batch.
const payloadTimeout = 5 * time.Second

// runGap is the widest gap between two sequences read by one batch get:
// a batch get brings every request in the run it spans, so the requests
// in its gaps that were not asked for are read for nothing.
const runGap = 4

// errPayloadGone is a request no longer in the stream (removed behind the
// dispatcher's back).
var errPayloadGone = errors.New("request no longer in the stream")

// directGetHeaders are what a direct get adds to the stored headers.
var directGetHeaders = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp",
	"Nats-Last-Sequence", "Nats-Num-Pending", "Nats-Msg-Size"}

// payloadReader reads stored requests of one stream by sequence.
type payloadReader struct {
	nc     *nats.Conn
	api    string // $JS.API.DIRECT.GET.<stream>
	msgGet string // $JS.API.STREAM.MSG.GET.<stream>, answered by the leader
	prefix string // of the replies: prefix + call id
	sub    *nats.Subscription

	mu    sync.Mutex
	next  uint64
	calls map[uint64]payloadCall
}

// payloadCall is a get in flight: of the request at index i of a read, or
// (i < 0) a batch get, answered by the requests of its run and an end.
type payloadCall struct {
	i  int
	ch chan<- payloadReply
}

type payloadReply struct {
	i   int // as the call's
	m   *nats.Msg
	end bool // the call's last reply
}

func newPayloadReader(nc *nats.Conn, stream string) (*payloadReader, error) {
	r := &payloadReader{
		nc:     nc,
		api:    "$JS.API.DIRECT.GET." + stream,
		msgGet: "$JS.API.STREAM.MSG.GET." + stream,
		prefix: reserved.PayloadInbox + nuid.Next() + ".",
		calls:  make(map[uint64]payloadCall),
	}
	sub, err := nc.Subscribe(r.prefix+"*", r.onReply)
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	r.sub = sub
	return r, nil
}

func (r *payloadReader) onReply(m *nats.Msg) {
	id, err := strconv.ParseUint(m.Subject[len(r.prefix):], 10, 64)
	if err != nil {
		return
	}
	r.mu.Lock()
	c, ok := r.calls[id]
	// A batch's requests carry their sequence; its end (status 204 EOB)
	// or its error (404: nothing from there on) does not.
	end := c.i >= 0 || m.Header.Get("Nats-Sequence") == ""
	if ok && end {
		delete(r.calls, id)
	}
	r.mu.Unlock()
	if ok {
		c.ch <- payloadReply{c.i, m, end} // buffered for every reply of its read
	}
}

// stored is one request read back: its stored headers and payload.
type stored struct {
	hdr  nats.Header
	data []byte
	err  error // errPayloadGone, or why it could not be read
}

// read gets the requests at seqs, in that order.
func (r *payloadReader) read(seqs []uint64) []stored {
	out := make([]stored, len(seqs))
	if len(seqs) == 0 {
		return out
	}
	want := make([]int, len(seqs))
	for i := range want {
		want[i] = i
	}
	if missed := r.get(seqs, want, out, true); len(missed) > 0 {
		r.get(seqs, missed, out, false)
	}
	for i := range out {
		if errors.Is(out[i].err, errPayloadGone) {
			out[i] = r.readFromLeader(seqs[i])
		}
	}
	return out
}

// getCall is one get to send: of seqs[i], or of the run first..last.
type getCall struct {
	i           int
	first, last uint64
}

// get reads the requests at seqs[i] for i in want into out: with batch,
// runs of close sequences by one batch get each, and it returns those a
// batch get did not bring (to be read one by one); without, one get each.
func (r *payloadReader) get(seqs []uint64, want []int, out []stored, batch bool) (missed []int) {
	var (
		calls []getCall
		index map[uint64]int // sequence -> index, of those batch gets read
		size  int            // replies that may come
	)
	if batch {
		sorted := slices.Clone(want)
		slices.SortFunc(sorted, func(a, b int) int { return cmp.Compare(seqs[a], seqs[b]) })
		for k := 0; k < len(sorted); {
			n := 1
			for k+n < len(sorted) && seqs[sorted[k+n]]-seqs[sorted[k+n-1]] <= runGap && seqs[sorted[k+n]] != seqs[sorted[k+n-1]] {
				n++
			}
			if n == 1 {
				calls = append(calls, getCall{i: sorted[k]})
				size++
			} else {
				if index == nil {
					index = make(map[uint64]int, len(want))
				}
				for _, i := range sorted[k : k+n] {
					index[seqs[i]] = i
				}
				c := getCall{i: -1, first: seqs[sorted[k]], last: seqs[sorted[k+n-1]]}
				calls = append(calls, c)
				size += int(c.last-c.first) + 2
			}
			k += n
		}
	} else {
		for _, i := range want {
			calls = append(calls, getCall{i: i})
		}
		size = len(calls)
	}
	ch := make(chan payloadReply, size)
	ids := make([]uint64, len(calls))
	r.mu.Lock()
	for k, c := range calls {
		r.next++
		ids[k] = r.next
		r.calls[r.next] = payloadCall{c.i, ch}
	}
	r.mu.Unlock()
	body := make([]byte, 0, 48)
	left := 0
	for k, c := range calls {
		seq := c.first
		if c.i >= 0 {
			seq = seqs[c.i]
		}
		body = strconv.AppendUint(append(body[:0], `{"seq":`...), seq, 10)
		if c.i < 0 {
			body = strconv.AppendUint(append(body, `,"batch":`...), c.last-c.first+1, 10)
		}
		body = append(body, '}')
		if err := r.nc.PublishRequest(r.api, r.prefix+strconv.FormatUint(ids[k], 10), body); err != nil {
			if c.i >= 0 {
				out[c.i].err = err
			}
			continue // never sent: no reply will come; a batch's requests are missed
		}
		left++
	}
	got := make([]bool, len(seqs))
	timedOut := false
	timer := time.NewTimer(payloadTimeout)
	defer timer.Stop()
	for left > 0 {
		select {
		case rep := <-ch:
			if rep.end {
				left--
			}
			if rep.i >= 0 {
				out[rep.i], got[rep.i] = decodeDirectGet(rep.m), true
				continue
			}
			if rep.end {
				continue
			}
			vs := rep.m.Header.Values("Nats-Sequence") // the server's is the last
			seq, err := strconv.ParseUint(vs[len(vs)-1], 10, 64)
			if i, ok := index[seq]; ok && err == nil && !got[i] {
				out[i], got[i] = decodeDirectGet(rep.m), true
			}
		case <-timer.C:
			r.mu.Lock()
			for k, id := range ids {
				if _, ok := r.calls[id]; ok {
					delete(r.calls, id)
					if c := calls[k]; c.i >= 0 {
						out[c.i].err = fmt.Errorf("reading request %d: no answer within %s", seqs[c.i], payloadTimeout)
					}
				}
			}
			r.mu.Unlock()
			left, timedOut = 0, true
		}
	}
	r.mu.Lock()
	for _, id := range ids {
		delete(r.calls, id) // those whose send failed
	}
	r.mu.Unlock()
	for seq, i := range index {
		switch {
		case got[i] || out[i].err != nil:
		case timedOut:
			out[i].err = fmt.Errorf("reading request %d: no answer within %s", seq, payloadTimeout)
		default:
			missed = append(missed, i)
		}
	}
	return missed
}

// readFromLeader reads the request at seq through the stream's leader. Any
// replica answers a direct get, and a follower that is behind (catching up
// after its node restarted, or not yet holding the newest messages) answers
// 404 for a request the stream holds: a 404 is asked of the leader before
// the request counts as gone.
func (r *payloadReader) readFromLeader(seq uint64) stored {
	body := strconv.AppendUint([]byte(`{"seq":`), seq, 10)
	m, err := r.nc.Request(r.msgGet, append(body, '}'), payloadTimeout)
	if err != nil {
		return stored{err: fmt.Errorf("reading request %d from the stream's leader: %w", seq, err)}
	}
	var rep struct {
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return stored{err: fmt.Errorf("reading request %d from the stream's leader: %w", seq, err)}
	}
	switch {
	case rep.Error != nil && rep.Error.Code == http.StatusNotFound:
		return stored{err: errPayloadGone}
	case rep.Error != nil:
		return stored{err: fmt.Errorf("reading request %d from the stream's leader: %d %s", seq, rep.Error.Code, rep.Error.Description)}
	case rep.Message == nil:
		return stored{err: fmt.Errorf("reading request %d from the stream's leader: no message in %q", seq, m.Data)}
	}
	hdr := nats.Header{}
	if len(rep.Message.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(rep.Message.Header); err != nil {
			return stored{err: fmt.Errorf("reading request %d from the stream's leader: headers: %w", seq, err)}
		}
	}
	return stored{hdr: hdr, data: rep.Message.Data}
}

func decodeDirectGet(m *nats.Msg) stored {
	switch st := m.Header.Get("Status"); st {
	case "":
	case "404":
		return stored{err: errPayloadGone}
	default:
		return stored{err: fmt.Errorf("reading request: status %s %s", st, m.Header.Get("Description"))}
	}
	for _, h := range directGetHeaders {
		delete(m.Header, h)
	}
	return stored{hdr: m.Header, data: m.Data}
}

func (r *payloadReader) close() {
	if r != nil && r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}

// leaseBytes is the size of a lease's secret: 128 bits from crypto/rand,
// so one lease says nothing of another (nuid's are sequential).
const leaseBytes = 16

// newLeases makes n leases.
func newLeases(n int) []string {
	buf := make([]byte, leaseBytes*n)
	_, _ = rand.Read(buf) // never fails (crypto/rand)
	out := make([]string, n)
	for i := range out {
		out[i] = base64.RawURLEncoding.EncodeToString(buf[i*leaseBytes : (i+1)*leaseBytes])
	}
	return out
}

// shipment is a fetch's reply on its way: the jobs leased to it, to be
// read back from the stream and framed once mu is released.
type shipment struct {
	reply string
	now   time.Time
	jobs  []shipJob
	// park is the fetch, when it may wait: taken back to wait again if
	// every job picked for it was another dispatcher's.
	park *parkedFetch
}

// shipJob is what a leased job's frame needs, copied under mu.
type shipJob struct {
	j          *sched.Job
	seq        uint64
	lease      string
	subject    string
	arrived    time.Time
	deliveries int
	extra      []string
	rec        leaseRecord // for the lease store, written before it ships
	rev        uint64      // of the job's record, as the dispatcher knows it: the write goes over it
	class      string      // the capped class it takes a slot of (classes.go)
}

// ship records the leases of the shipments' jobs in the lease store and
// reads the jobs back from the stream, both in flight at once, then frames
// them and sends each fetch its reply. A job is shipped only once its
// lease is stored: a dispatcher that takes over knows every lease a
// worker may hold. A job whose lease cannot be stored, or that cannot be
// read, goes back to the queue (out of the index when it has left the
// stream). One whose record another dispatcher moved first is not this
// one's to give: it takes what the record says (unship), and a fetch left
// with nothing is not answered, since that dispatcher answers it. mu is
// not held.
func (d *Dispatcher) ship(ships []*shipment) {
	if len(ships) == 0 {
		return
	}
	var seqs []uint64
	for _, sh := range ships {
		for _, sj := range sh.jobs {
			seqs = append(seqs, sj.seq)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseTimeout)
	defer cancel()
	if ships = d.takeSlots(ctx, ships); len(ships) == 0 {
		return
	}
	seqs = seqs[:0]
	for _, sh := range ships {
		for _, sj := range sh.jobs {
			seqs = append(seqs, sj.seq)
		}
	}
	writes := d.leases.write(ships)
	got := d.payloads.read(seqs)
	written := writes.wait(ctx)
	taken := 0
	for k, w := range written {
		switch {
		case w.err == nil:
		case moved(w.err):
			// Read whatever the payload's read said: what the record
			// says decides where the job is.
			taken++
			t, err := d.leases.read(ctx, seqs[k])
			if err != nil {
				got[k].err = fmt.Errorf("recording its lease: %w (and then %w)", w.err, err)
			} else {
				got[k].err = t
			}
		case got[k].err == nil:
			got[k].err = fmt.Errorf("recording its lease: %w", w.err)
		}
	}
	d.leased(ships, written)
	if taken > 0 {
		d.log.Warn("jobs leased by another dispatcher of this queue first: this node may no longer lead the queue's stream",
			"jobs", taken)
		if d.deps.Resync != nil {
			d.deps.Resync()
		}
	}
	var (
		out    []*outMsg
		failed []shipJob
		errs   []error
		repark []*parkedFetch
	)
	k := 0
	for _, sh := range ships {
		frame := semaq.AppendJobFrameHeader(make([]byte, 0, 64+d.shipSize(sh, got[k:])))
		n := 0
		for _, sj := range sh.jobs {
			p := got[k]
			k++
			if p.err != nil {
				failed, errs = append(failed, sj), append(errs, p.err)
				continue
			}
			extra := d.span(&sj, p.hdr, sh.now)
			ack := semaq.QueueAckPrefix + d.name + "." + strconv.FormatUint(sj.seq, 10) + "." + sj.lease
			frame = semaq.AppendFrameJob(frame, ack, p.hdr, extra, p.data)
			n++
		}
		if n == 0 {
			if taken, gone := settled(got[k-len(sh.jobs) : k]); taken || gone {
				// Another dispatcher answers it, or it waits on; with none
				// left to pick (they left the stream), nothing now.
				switch {
				case sh.park != nil && time.Now().Before(sh.park.until):
					repark = append(repark, sh.park)
				case gone:
					out = append(out, endOfBatch(sh.reply, 408, 0, "no requests"))
				}
				continue
			}
			out = append(out, errorEnd(sh.reply, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: the requests picked could not be read; fetch again", d.name)))
			continue
		}
		m := endOfBatch(sh.reply, 204, n, "")
		m.Data = frame
		out = append(out, m)
	}
	if len(failed) > 0 {
		d.unship(failed, errs)
	}
	if len(repark) > 0 {
		d.mu.Lock()
		d.parked = append(d.parked, repark...)
		d.mu.Unlock()
	}
	d.send(out)
}

func (d *Dispatcher) shipSize(sh *shipment, got []stored) int {
	n := 0
	for i, sj := range sh.jobs {
		n += len(got[i].data) + 2*len(sj.subject) + 512
		for k, vs := range got[i].hdr {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
	}
	return n
}

// leased records the revisions of the job records written (written, in
// shipping order). mu is not held.
func (d *Dispatcher) leased(ships []*shipment, written []leaseWritten) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := 0
	for _, sh := range ships {
		for _, sj := range sh.jobs {
			w := written[k]
			k++
			if w.err != nil {
				continue
			}
			j := sj.j
			switch {
			case j.State == sched.JobGone:
				// Done while its record was on its way: drop that too.
				d.leases.leased(sj.seq, w.rev)
				d.leases.done(sj.seq, "")
			default:
				d.leases.leased(sj.seq, w.rev)
			}
		}
	}
}

// settled reports whether every job picked for a fetch was lost to
// another dispatcher's lease (taken) or had left the stream (gone, only
// when none was taken): no read failed.
func settled(got []stored) (taken, gone bool) {
	for _, g := range got {
		var t *leaseTaken
		switch {
		case errors.As(g.err, &t):
			taken = true
		case errors.Is(g.err, errPayloadGone):
			gone = true
		default:
			return false, false
		}
	}
	return taken, gone && !taken
}

// unship takes back jobs that could not be shipped: out of the index when
// they left the stream; held by another worker, or done, when the lease
// store says so (another dispatcher leased them first); back to the queue
// otherwise.
func (d *Dispatcher) unship(failed []shipJob, errs []error) {
	now := time.Now()
	d.mu.Lock()
	for i, sj := range failed {
		j := sj.j
		if j.State != sched.JobHeld || j.Lease != sj.lease || j.Acking {
			continue // cancelled meanwhile
		}
		d.releaseSlot(j)
		var t *leaseTaken
		if errors.As(errs[i], &t) {
			d.stats.leaseConflicts++
			d.takeRecord(j, t, now)
			continue
		}
		if errors.Is(errs[i], errPayloadGone) {
			d.log.Warn("request left the stream behind the dispatcher's back", "seq", j.Seq)
			d.sched.Forget(j)
			d.leases.done(j.Seq, "")
			continue
		}
		d.log.Warn("request could not be read; it goes back to the queue", "seq", j.Seq, "err", errs[i])
		j.Deliveries--
		d.sched.Requeue(j)
	}
	d.publishDepth(usage{})
	d.mu.Unlock()
}

// takeRecord makes j, in the index under a lease of this dispatcher's
// that the lease store did not take, what the store's record t says: done
// (out of the index: whoever wrote the marker removed it from the stream),
// held by another dispatcher's worker until its lease ends, or queued
// again. mu is held.
func (d *Dispatcher) takeRecord(j *sched.Job, t *leaseTaken, now time.Time) {
	if j.State == sched.JobHeld {
		d.unbindLease(j)
	}
	switch {
	case t.gone && t.done != "":
		// Acked under another dispatcher's lease. Out of the stream too,
		// if it is still there: an ack confirmed by a consumer of the
		// same name made anew by the other dispatcher may have left it
		// (the loop removes it). A marker naming no ack is written once
		// the request left the stream, so with the request here it says
		// nothing (the default below): the job is queued again, never
		// removed on its word.
		d.log.Info("request done by another dispatcher of this queue", "seq", j.Seq)
		d.sched.Forget(j)
		d.removing[j.Seq] = true
		d.leases.at(j.Seq, 0)
		d.leases.finish(j.Seq, t.done, now.Add(d.cfg.AckWait).UnixMilli())
	case t.rec != nil:
		// Held by the other's worker, however its end reads on this
		// node's clock: restore gives it a whole ack wait.
		d.sched.Forget(j)
		d.restore(j, *t.rec) // in the index no more: AddHeld takes it
		if _, bound := d.classes.slots[j.Seq]; !bound && d.deps.Classes != nil {
			// The class slot the other dispatcher took for it, if any,
			// is given back where this lease ends, whichever of them
			// sees it end.
			if ref, ok := d.deps.Classes.Owned(d.name)[j.Seq]; ok {
				if d.classes.slots == nil {
					d.classes.slots = make(map[uint64]SlotRef)
				}
				d.classes.slots[j.Seq] = ref
			}
		}
	default:
		d.leases.at(j.Seq, t.rev)
		if j.State == sched.JobHeld {
			j.Deliveries--
			d.sched.Requeue(j)
		}
	}
}
