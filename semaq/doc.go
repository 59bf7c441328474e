// Package semaq holds the types that every SemaQ front door and client shares:
// the semantic envelope (the NATS headers that carry model, priority, tenant,
// deadline and trace context), the priority scale, and the wire types of the
// management API and of publish acknowledgements.
//
// The envelope is plain NATS headers, so any NATS client can produce it; this
// package is how the broker and the Go SDK agree on what the headers mean.
// docs/envelope.md is the user-facing contract.
package semaq
