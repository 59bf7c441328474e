package broker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// Observability of work queues (dispatch*.go): queue state read at scrape
// time, and per request the wait, the end-to-end delivery latency and a
// dispatch span.

// queueSource reports every dispatcher of the node to the metrics.
type queueSource struct{ s *Server }

// QueueStats scans the queued requests of every dispatcher, one dispatcher
// lock at a time: O(queued requests) per scrape.
func (q queueSource) QueueStats() []metrics.QueueStat {
	q.s.queues.mu.Lock()
	ds := make([]*dispatcher, 0, len(q.s.queues.all))
	for _, d := range q.s.queues.all {
		ds = append(ds, d)
	}
	q.s.queues.mu.Unlock()
	type key struct {
		tenant, model string
		prio          int
	}
	now := time.Now()
	var out []metrics.QueueStat
	for _, d := range ds {
		idx := map[key]int{}
		d.mu.Lock()
		d.sched.Each(func(j *sched.Job) {
			if j.State == sched.JobHeld {
				return // with a worker: not waiting
			}
			k := key{j.Tenant, j.Model, j.Prio}
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, metrics.QueueStat{Tenant: j.Tenant, Priority: j.Prio, Model: j.Model})
			}
			st := &out[i]
			st.Depth++
			st.TokensWaiting += j.Tokens
			st.OldestAge = max(st.OldestAge, now.Sub(j.Arrived))
		})
		d.mu.Unlock()
	}
	return out
}

// observeDispatch records a request handed to a worker after waiting since
// it arrived. d.mu is held: this takes only leaf locks.
func (s *Server) observeDispatch(j *sched.Job, now time.Time) {
	wait := now.Sub(j.Arrived)
	s.metrics.Queue(j.Tenant, j.Prio, j.Model).Dispatched(wait)
	if s.ingress != nil && s.metrics != nil {
		if st := s.ingress.streamFor(j.Subject); st != nil {
			for _, p := range st.subjects {
				if subjectMatches(p, j.Subject) {
					s.metrics.Subject(p).Delivered(wait)
					break
				}
			}
		}
	}
}

// observeDispatchSpan records the dispatch span of a job (the time in the
// queue) once its stored headers are read back. It returns the job's
// extra headers, the broker's headers of the worker's copy, with the span
// as traceparent: the frame puts them before the stored ones, so the
// worker continues from the dispatch span. d.mu is not held.
func (s *Server) observeDispatchSpan(queue string, sj *shipJob, hdr nats.Header, now time.Time) []string {
	extra := sj.extra
	if s.tracing == nil || hdr.Get(semaq.HdrTraceParent) == "" {
		return extra
	}
	parent := tracevocab.Extract(context.Background(), hdr)
	if !trace.SpanContextFromContext(parent).IsValid() {
		return extra
	}
	ctx, span := s.tracing.Tracer().Start(parent, "dispatch "+queue,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(sj.arrived))
	if span.IsRecording() {
		env, _ := semaq.Parse(hdr, sj.arrived)
		span.SetAttributes(tracevocab.EnvelopeAttributes(env)...)
		span.SetAttributes(tracevocab.AttrMsgSystem.String("nats"), tracevocab.AttrMsgOperation.String("send"),
			tracevocab.AttrMsgDest.String(tracevocab.ValidUTF8(sj.subject)), tracevocab.AttrStream.String(queue),
			tracevocab.AttrStreamSeq.Int64(int64(sj.seq)), tracevocab.AttrNumDelivered.Int64(int64(sj.deliveries)))
		h := nats.Header{}
		tracevocab.Inject(ctx, h)
		extra = extra[:len(extra):len(extra)] // never write into the shared array
		for k, vs := range h {
			for _, v := range vs {
				extra = append(extra, k, v)
			}
		}
	}
	// The span covers the wait; the worker's process span follows it.
	span.End(trace.WithTimestamp(now))
	return extra
}

// observeDrop records a request that left its queue undispatched
// (metrics.DropExpired, DropCanceled).
func (s *Server) observeDrop(j *sched.Job, reason string) {
	s.metrics.Queue(j.Tenant, j.Prio, j.Model).Dropped(reason)
}
