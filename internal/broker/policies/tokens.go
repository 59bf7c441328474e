package policies

import (
	"strings"

	"github.com/semaq/semaq/internal/streamfilter"
	"github.com/semaq/semaq/semaq"
)

// tokenSet is the compiled filter of the token-stream rules that apply to
// one tenant, and those rules by name.
type tokenSet struct {
	set   *streamfilter.Set
	rules map[string]*rule
}

// tokenSet returns the filter for tenant token tt, nil when no rule applies
// to its streams. Tenants no rule names share one; so the cache holds at
// most one entry per tenant a rule names, plus one.
func (t *Table) tokenSet(tt string) *tokenSet {
	key, any := "", false
	for _, r := range t.rules {
		if !r.tokens {
			continue
		}
		any = true
		if r.def.Tenant != "" && semaq.TokenTenant(r.def.Tenant) == tt {
			key = tt
		}
	}
	if !any {
		return nil
	}
	if v, ok := t.tokenSets.Load(key); ok {
		return v.(*tokenSet)
	}
	ts := &tokenSet{rules: map[string]*rule{}}
	var frs []streamfilter.Rule
	for _, r := range t.rules {
		if !r.tokens || r.def.Tenant != "" && semaq.TokenTenant(r.def.Tenant) != tt {
			continue
		}
		ts.rules[r.def.Name] = r
		frs = append(frs, r.pii...)
		frs = append(frs, r.content...)
	}
	if len(frs) == 0 {
		t.tokenSets.Store(key, (*tokenSet)(nil))
		return nil
	}
	set, err := streamfilter.Compile(frs, streamfilter.Options{MaxHold: maxHold})
	if err != nil {
		// compileRule compiled each rule alone; together they compile
		// too, but a node never lets a stream by unfiltered for it.
		set, _ = streamfilter.Compile(nil, streamfilter.Options{MaxHold: maxHold})
	}
	ts.set = set
	v, _ := t.tokenSets.LoadOrStore(key, ts)
	return v.(*tokenSet)
}

// TokenStream is the policy of one token stream: the token relay feeds it
// each record's text, in order, under its lock. Not safe for concurrent
// use. The stream keeps the rules in force when it started.
type TokenStream struct {
	s       *Store
	id      string
	tenant  string
	ts      *tokenSet            // nil: no rule applies
	fs      *streamfilter.Stream // nil: no rule applies
	plugins bool                 // tokens-stage plugins apply
	stopped bool
}

// TokenStream returns the policy of request id's token stream of tenant
// token tt, nil when no rule applies to it.
func (s *Store) TokenStream(id, tt string) *TokenStream {
	t := s.Table()
	ts := t.tokenSet(tt)
	plugins := false
	for _, lp := range t.plugins {
		plugins = plugins || lp.def.Stage == semaq.PluginStageTokens && (lp.def.Tenant == "" || semaq.TokenTenant(lp.def.Tenant) == tt)
	}
	if (ts == nil || ts.set == nil) && !plugins {
		return nil
	}
	p := &TokenStream{s: s, id: id, tenant: tt, plugins: plugins}
	if ts != nil && ts.set != nil {
		p.ts, p.fs = ts, ts.set.Stream()
		for _, r := range ts.rules {
			r.messages.Add(1)
		}
	}
	return p
}

// Chunk filters one record's text: out is what may be stored now (the
// rest is held back for what follows); stop says a rule ends the stream,
// naming it in reason, after out.
func (p *TokenStream) Chunk(text string) (out string, stop bool, reason string) {
	if p.stopped {
		return "", true, "the stream was stopped by policy"
	}
	out = text
	if p.fs != nil {
		var evs []streamfilter.Event
		var err error
		out, evs, stop, err = p.fs.Write(text)
		if err != nil {
			p.stopped = true
			return "", true, err.Error()
		}
		reason = p.events(evs)
		p.s.deps.Metrics.PolicyHeld(p.fs.Held())
	}
	if !stop && p.plugins && out != "" {
		out, stop, reason = p.s.tokenPlugins(p.s.Table(), p.id, p.tenant, out)
	}
	p.stopped = stop
	return out, stop, reason
}

// Flush is the text held back at the stream's end, decided.
func (p *TokenStream) Flush() (out string, stop bool, reason string) {
	if p.stopped {
		return "", true, ""
	}
	if p.fs != nil {
		var evs []streamfilter.Event
		out, evs, stop = p.fs.Flush()
		reason = p.events(evs)
	}
	if !stop && p.plugins && out != "" {
		out, stop, reason = p.s.tokenPlugins(p.s.Table(), p.id, p.tenant, out)
	}
	p.stopped = stop
	return out, stop, reason
}

// events counts what the filter decided; the reason of a stop names its
// rule.
func (p *TokenStream) events(evs []streamfilter.Event) (reason string) {
	m := p.s.deps.Metrics
	for _, e := range evs {
		name, rest, _ := strings.Cut(e.Rule, "/")
		typ, _, _ := strings.Cut(rest, "/")
		r := p.ts.rules[name]
		if r == nil {
			continue
		}
		r.count(typ, 1)
		m.PolicyFinding(name, "tokens", typ, 1)
		switch e.Action {
		case streamfilter.Mask:
			a := semaq.PIIMask
			if typ != "content" {
				a = orDefault(r.def.Actions[typ], orDefault(r.def.Action, semaq.PIIMask))
			}
			m.PolicyAction(name, "tokens", a)
		case streamfilter.Stop:
			r.stopped.Add(1)
			m.PolicyAction(name, "tokens", semaq.ContentStop)
			reason = "policy " + name + " stopped the stream: its content policy matched"
			p.s.event(semaq.PolicyEvent{Kind: "stop", Policy: name, Tenant: tenantOfToken(p.tenant), Request: p.id})
		case streamfilter.Flag:
			r.flagged.Add(1)
			m.PolicyAction(name, "tokens", semaq.ContentFlag)
			p.s.event(semaq.PolicyEvent{Kind: "flag", Policy: name, Tenant: tenantOfToken(p.tenant), Request: p.id})
		}
	}
	return reason
}

// tenantOfToken is the tenant a tenant token names ("" for none).
func tenantOfToken(tt string) string {
	if tt == semaq.TokenNoTenant {
		return ""
	}
	return tt
}
