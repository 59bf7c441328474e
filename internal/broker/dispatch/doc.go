// Package dispatch serves a node's work queues: one Dispatcher per queue,
// on the node that leads the queue's stream. A Dispatcher indexes the
// queue's requests as they are stored (a headers-only consumer of its own
// that holds every request until it is done), schedules them (package
// sched, a pure data structure), hands them to workers' fetches with a
// lease, takes their answers (ack, nak, in progress, term) and cancels,
// expires and redelivers them on its timers, dead-letters those it gives
// up on, and admits or refuses new requests for the ingress (admission.go).
//
// It reaches nothing of the node but what Deps gives it: connections, the
// dead-letter sink, the token-stream bindings, an Observer for metrics and
// a tracer. Start starts one; Close stops it and waits for every goroutine
// it started. Package streams keeps the set of dispatchers and the
// $SQ.API.QUEUE management API (internal/broker/streams, queue.go); the
// node hands it Start (internal/broker, wiring.go).
package dispatch
