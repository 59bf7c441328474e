// Package broker runs a SemaQ node: an embedded NATS server with JetStream as
// the data plane, the semantic ingress in front of every stream, the
// management API on $SQ.API, and the HTTP front door.
//
// Writes to storage go through one reserved namespace ($SQ.w.>) that only the
// node's internal user may publish to. Clients publish on public subjects;
// the ingress validates each message and republishes it into the reserved
// namespace with the client's reply subject, so JetStream itself sends the
// PubAck to the client. A stream's subject transform maps the reserved
// subject back to the public one, so stored messages and consumer filters use
// the subjects users know.
package broker
