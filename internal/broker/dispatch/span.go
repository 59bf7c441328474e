package dispatch

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/tracevocab"
	"github.com/semaq/semaq/semaq"
)

// span records the dispatch span of a job (the time in the queue) once its
// stored headers are read back. It returns the job's extra headers, the
// broker's headers of the worker's copy, with the span as traceparent: the
// frame puts them before the stored ones, so the worker continues from the
// dispatch span. mu is not held.
func (d *Dispatcher) span(sj *shipJob, hdr nats.Header, now time.Time) []string {
	extra := sj.extra
	if d.deps.Tracer == nil || hdr.Get(semaq.HdrTraceParent) == "" {
		return extra
	}
	parent := tracevocab.Extract(context.Background(), hdr)
	if !trace.SpanContextFromContext(parent).IsValid() {
		return extra
	}
	ctx, span := d.deps.Tracer.Start(parent, "dispatch "+d.name,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(sj.arrived))
	if span.IsRecording() {
		env, _ := semaq.Parse(hdr, sj.arrived)
		span.SetAttributes(tracevocab.EnvelopeAttributes(env)...)
		span.SetAttributes(tracevocab.AttrMsgSystem.String("nats"), tracevocab.AttrMsgOperation.String("send"),
			tracevocab.AttrMsgDest.String(tracevocab.ValidUTF8(sj.subject)), tracevocab.AttrStream.String(d.name),
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
