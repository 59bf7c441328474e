package api

import "context"

type httpPrincipalKey struct{}

// WithHTTPPrincipal returns ctx carrying p, the sender of an HTTP request
// the front door authenticated (internal/httpauth sets it), for what the
// broker serves over HTTP in process: the audit of schema registry
// writes.
func WithHTTPPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, httpPrincipalKey{}, p)
}

// HTTPPrincipal is the principal WithHTTPPrincipal put in ctx; false with
// auth off, where HTTP requests carry none.
func HTTPPrincipal(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(httpPrincipalKey{}).(Principal)
	return p, ok
}
