package registry

import (
	"context"
	"slices"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// Binding ties a public NATS subject pattern to a registry subject: the
// ingress validates messages published on a matching subject against the
// registry subject's schemas (schema-on-write).
type Binding struct {
	Pattern string `json:"pattern"`
	Subject string `json:"subject"`
}

// compiledBinding is a binding with its specificity: the kind of each
// pattern token (literal, '*', '>').
type compiledBinding struct {
	Binding
	kinds []byte
}

const (
	kindLiteral byte = iota
	kindStar
	kindTail
)

func compileBinding(b Binding) compiledBinding {
	tokens := strings.Split(b.Pattern, ".")
	kinds := make([]byte, len(tokens))
	for i, t := range tokens {
		switch t {
		case "*":
			kinds[i] = kindStar
		case ">":
			kinds[i] = kindTail
		default:
			kinds[i] = kindLiteral
		}
	}
	return compiledBinding{Binding: b, kinds: kinds}
}

// sortBindings orders bindings most specific first: token by token, a
// literal before '*' before '>'. Two patterns that match one subject differ
// in kind at their first differing token (if they did not, their literal
// tokens would be the subject's and they would be one pattern), so the
// first match in this order is the most specific one. Ties (patterns no
// subject matches both of) break by pattern text, for determinism.
func sortBindings(bs []compiledBinding) {
	slices.SortFunc(bs, func(a, b compiledBinding) int {
		if c := slices.Compare(a.kinds, b.kinds); c != 0 {
			return c
		}
		return strings.Compare(a.Pattern, b.Pattern)
	})
}

// checkPattern validates NATS subject pattern syntax: non-empty tokens
// without spaces or control characters, '*' standing for a whole token and
// '>' for the last ones.
func checkPattern(p string) error {
	return semaq.CheckSubject(p, true)
}

// matchPattern reports whether the NATS subject matches the pattern,
// without allocating.
func matchPattern(pattern, subject string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		if pt == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if st == "" || (pt != "*" && pt != st) {
			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

// Bind makes messages on NATS subjects matching pattern subject to the
// registry subject's schemas. The subject must have a live version.
// Binding a pattern again replaces its subject.
func (r *Registry) Bind(ctx context.Context, pattern, subject string) error {
	if err := checkPattern(pattern); err != nil {
		return errorf(CodeInvalidBinding, "Invalid binding: %v", err)
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.catchUp(ctx); err != nil {
		return err
	}
	if !r.state.Load().subjects.at(subject).hasLive() {
		return subjectNotFound(subject)
	}
	rev, err := r.kv.Put(ctx, keyBinding(pattern), marshal(Binding{Pattern: pattern, Subject: subject}))
	if err != nil {
		return storeErr("storing the binding", err)
	}
	return r.waitRev(ctx, rev)
}

// Unbind removes the binding of pattern; ErrBindingNotFound when there is
// none.
func (r *Registry) Unbind(ctx context.Context, pattern string) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if err := r.catchUp(ctx); err != nil {
		return err
	}
	if _, ok := r.state.Load().bindRevs[pattern]; !ok {
		return errorf(CodeBindingNotFound, "Binding '%s' not found", pattern)
	}
	if err := r.kv.Purge(ctx, keyBinding(pattern)); err != nil {
		return storeErr("deleting the binding", err)
	}
	return r.catchUp(ctx)
}

// Bindings lists the bindings, sorted by pattern.
func (r *Registry) Bindings() []Binding {
	bs := r.state.Load().bindings
	out := make([]Binding, len(bs))
	for i, b := range bs {
		out[i] = b.Binding
	}
	slices.SortFunc(out, func(a, b Binding) int { return strings.Compare(a.Pattern, b.Pattern) })
	return out
}

// BindingFor returns the binding whose pattern matches the NATS subject
// most specifically (literal tokens beat '*', '*' beats '>'). Lock-free,
// for the ingress hot path.
func (r *Registry) BindingFor(natsSubject string) (Binding, bool) {
	for _, b := range r.state.Load().bindings {
		if matchPattern(b.Pattern, natsSubject) {
			return b.Binding, true
		}
	}
	return Binding{}, false
}
