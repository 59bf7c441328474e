package gateway

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// An answer may carry placeholders a tokenize policy put in its prompt
// (<EMAIL_1>, docs/policy.md): the gateway puts the values back before
// the caller reads them, with the caller's own rights, so only the tenant
// that sent them gets them. The values are fetched once per request, when
// the first placeholder shows. In a stream, text that could still be the
// start of a placeholder waits for the next chunk.

// placeholderRE matches a whole placeholder.
var placeholderRE = regexp.MustCompile(`<[A-Z][A-Z_]*_[1-9][0-9]*>`)

// maxPlaceholder bounds a placeholder's length, and so the text a stream
// holds back.
const maxPlaceholder = 24

type restorer struct {
	c             *client.Client
	scope, tenant string
	fetched       bool
	values        map[string]string
	held          string
	failed        error
}

// newRestorer restores the placeholders of a request's scope: its
// session's, else its own (the ingress's scopes, policies.vaultScope).
func newRestorer(c *client.Client, id, session, tenant string) *restorer {
	scope := "r." + id
	if session != "" {
		scope = "s." + session
	}
	return &restorer{c: c, scope: scope, tenant: tenant}
}

// all restores a whole answer.
func (r *restorer) all(ctx context.Context, s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	return placeholderRE.ReplaceAllStringFunc(s, func(ph string) string { return r.value(ctx, ph) })
}

// chunk restores the text of one chunk that can be sent now; what could
// still be a placeholder's start is held for the next.
func (r *restorer) chunk(ctx context.Context, s string) string {
	s = r.held + s
	r.held = ""
	if i := strings.LastIndexByte(s, '<'); i >= 0 && len(s)-i < maxPlaceholder && partialPlaceholder(s[i:]) {
		s, r.held = s[:i], s[i:]
	}
	return r.all(ctx, s)
}

// flush is the text held back when the answer ends.
func (r *restorer) flush(ctx context.Context) string {
	s := r.held
	r.held = ""
	return r.all(ctx, s)
}

// partialPlaceholder reports whether s ('<' and what follows) may become
// a placeholder with more text.
func partialPlaceholder(s string) bool {
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c == '_' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// value is ph's value in the scope, or ph itself.
func (r *restorer) value(ctx context.Context, ph string) string {
	if !r.fetched {
		r.fetched = true
		res, err := r.c.RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: r.scope, Tenant: r.tenant, Values: true})
		switch {
		case err == nil:
			r.values = res.Values
		case errors.Is(err, semaq.ErrVaultNotFound):
		default:
			r.failed = err
		}
	}
	if v, ok := r.values[ph]; ok {
		return v
	}
	return ph
}
