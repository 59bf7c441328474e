package semaq

// Headers a token-stream writer puts on its terminal record (final or
// error) so the broker can measure the stream: time to first token, time
// per output token and tokens per second, by model and tenant
// (docs/metrics.md). Durations are Go durations ("350ms") measured from
// the request: when the writer opened the stream, or the request's
// AI-Received when it knows it. AI-Model and AI-Tenant on the same record
// give the labels. All are optional; a record without them is still
// counted, with what it has.
const (
	// HdrTokenFirst is the time from the request to the first token.
	HdrTokenFirst = "SQ-Token-First"
	// HdrTokenElapsed is the time from the request to the terminal record.
	HdrTokenElapsed = "SQ-Token-Elapsed"
)
