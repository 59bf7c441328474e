package policies

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/pii"
	"github.com/semaq/semaq/internal/streamfilter"
	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/semaq"
)

// StepName names the stored rules' step in traces, metrics and refusals.
const StepName = "rules"

// vaultTries bounds the redos of a message whose scope another message
// wrote first.
const vaultTries = 4

// Step is the ingress's policy step of the stored rules and ingress
// plugins (docs/policy.md: it runs first, before the steps of the node's
// configuration).
type Step struct{ s *Store }

// Step returns the store's ingress step.
func (s *Store) Step() *Step { return &Step{s: s} }

// Name implements policy.Step.
func (*Step) Name() string { return StepName }

// Idle implements policy.Idler: with no rule or plugin stored the ingress
// skips the step.
func (st *Step) Idle() bool { return st.s.Table().Empty() }

// Apply implements policy.Step: the rules attached to the message, in name
// order, then the ingress plugins attached to it, in name order.
func (st *Step) Apply(ctx context.Context, m *policy.Message) (policy.Verdict, error) {
	// The scope is the broker's word on where the message's values are
	// kept: one its publisher wrote (in any case) would send a reader
	// restoring its placeholders to another message's values.
	verdict := policy.Pass
	for k := range m.Header {
		if strings.EqualFold(k, semaq.HdrPIIScope) {
			delete(m.Header, k)
			verdict = policy.Rewrite
		}
	}
	t := st.s.Table()
	if t.Empty() {
		return verdict, nil
	}
	tenant := m.Envelope.Tenant
	dry := policy.DryRun(ctx)
	var applied []*rule
	for _, r := range t.rules {
		if r.ingress && attached(r.def.Subjects, r.def.Streams, r.def.Tenant, tenant, m.Stream, m.Subject) {
			applied = append(applied, r)
		}
	}
	if len(applied) > 0 {
		v, err := st.applyRules(ctx, applied, m, dry)
		if err != nil {
			return policy.Pass, err
		}
		if v == policy.Rewrite {
			verdict = v
		}
	}
	for _, p := range t.plugins {
		if p.def.Stage != semaq.PluginStageIngress || !attached(p.def.Subjects, nil, p.def.Tenant, tenant, m.Stream, m.Subject) {
			continue
		}
		v, err := st.s.runIngressPlugin(ctx, p, m, dry)
		if err != nil {
			return policy.Pass, err
		}
		if v == policy.Rewrite {
			verdict = v
		}
	}
	return verdict, nil
}

// applyRules runs rules on m. Tokenized values are stored in the vault
// before the message goes on: a message whose values are lost cannot be
// restored, so a vault that cannot take them refuses the message.
func (st *Step) applyRules(ctx context.Context, rules []*rule, m *policy.Message, dry bool) (policy.Verdict, error) {
	orig := m.Data
	scope := vaultScope(m)
	for try := 0; ; try++ {
		var tok pii.Tokenizer
		var vt *scopeTokens
		if dry {
			tok = &dryTokens{n: map[pii.Type]int{}, seen: map[string]string{}}
		} else {
			// A session's scope is read first; a request's is new but
			// for a retry, which its create finds.
			vt = st.s.vault.tokens(ctx, m.Envelope.Tenant, scope, try == 0 && !strings.HasPrefix(scope, "s."))
			tok = vt
		}
		data, changed, err := st.runRules(ctx, rules, m, orig, tok, dry)
		if err != nil {
			return policy.Pass, err
		}
		if vt != nil && vt.dirty {
			err := vt.commit(ctx)
			if errors.Is(err, errVaultConflict) && try+1 < vaultTries {
				continue
			}
			if err != nil {
				st.s.deps.Metrics.PIIVault("tokenize", "error")
				return policy.Pass, semaq.NewAPIError(semaq.ErrUnavailable, "policy: the PII vault did not take the message's tokenized values: %v; nothing was stored", err)
			}
			st.s.deps.Metrics.PIIVault("tokenize", "ok")
			m.Header.Set(semaq.HdrPIIScope, scope)
		}
		if !changed {
			return policy.Pass, nil
		}
		m.Data = data
		return policy.Rewrite, nil
	}
}

// runRules applies each rule to the payload as the rule before left it.
func (st *Step) runRules(ctx context.Context, rules []*rule, m *policy.Message, data []byte, tok pii.Tokenizer, dry bool) ([]byte, bool, error) {
	changed := false
	for _, r := range rules {
		if !dry {
			r.messages.Add(1)
		}
		if r.redactor != nil {
			out, found, ch, err := r.redactor.Redact(data, tok)
			if err != nil {
				return nil, false, st.refusal(r, m, err, dry)
			}
			if !dry {
				st.countFound(r, "ingress", found)
			}
			if ch {
				data, changed = out, true
			}
		}
		if len(r.content) > 0 {
			out, ch, err := st.content(ctx, r, m, data, dry)
			if err != nil {
				return nil, false, err
			}
			if ch {
				data, changed = out, true
			}
		}
	}
	return data, changed, nil
}

// countFound counts a rule's findings by type and action.
func (st *Step) countFound(r *rule, stage string, found []pii.Located) {
	for _, f := range found {
		r.count(string(f.Type), 1)
		st.s.deps.Metrics.PolicyFinding(r.def.Name, stage, string(f.Type), 1)
		st.s.deps.Metrics.PolicyAction(r.def.Name, stage, string(f.Action))
	}
}

// refusal is the publisher's error for a rule that refused m: a blocked
// entity names its type and where, never its value.
func (st *Step) refusal(r *rule, m *policy.Message, err error, dry bool) error {
	var be *pii.BlockedError
	if errors.As(err, &be) {
		if !dry {
			r.blocked.Add(1)
			r.count(string(be.Type), 1)
			st.s.deps.Metrics.PolicyFinding(r.def.Name, "ingress", string(be.Type), 1)
			st.s.deps.Metrics.PolicyAction(r.def.Name, "ingress", semaq.PIIBlock)
		}
		where := "the payload"
		if be.Path != "" {
			where = be.Path
		}
		return semaq.NewAPIError(semaq.ErrPIIBlocked, "policy %s: %s holds a %s, which the policy blocks; nothing was stored", r.def.Name, where, be.Type)
	}
	if errors.Is(err, pii.ErrTokenizer) {
		st.s.deps.Metrics.PIIVault("tokenize", "error")
		return semaq.NewAPIError(semaq.ErrUnavailable, "policy %s: the PII vault: %v; nothing was stored", r.def.Name, err)
	}
	return semaq.NewAPIError(semaq.ErrPolicy, "policy %s refused the message on %s: %v", r.def.Name, m.Subject, err)
}

// content runs a rule's words and patterns on the payload's string values
// (its text when it is no JSON): mask rewrites, stop refuses the message,
// flag counts it and sends an event.
func (st *Step) content(_ context.Context, r *rule, m *policy.Message, data []byte, dry bool) ([]byte, bool, error) {
	set, err := r.contentSet()
	if err != nil {
		return nil, false, semaq.NewAPIError(semaq.ErrPolicy, "policy %s cannot run on this node: %v", r.def.Name, err)
	}
	var stopped, flagged int
	filter := func(s string) (string, error) {
		fs := set.Stream()
		out, evs, stop, err := fs.Write(s)
		if err != nil {
			return "", err
		}
		rest, evs2, stop2 := fs.Flush()
		for _, e := range append(evs, evs2...) {
			switch e.Action {
			case streamfilter.Stop:
				stopped++
			case streamfilter.Flag:
				flagged++
			}
		}
		if stop || stop2 {
			stopped++
			return s, nil
		}
		return out + rest, nil
	}
	out, changed, err := pii.RewriteStrings(data, r.def.Paths, filter)
	if err != nil {
		return nil, false, semaq.NewAPIError(semaq.ErrPolicy, "policy %s refused the message on %s: %v", r.def.Name, m.Subject, err)
	}
	if !dry {
		r.count("content", stopped+flagged)
		st.s.deps.Metrics.PolicyFinding(r.def.Name, "ingress", "content", stopped+flagged)
	}
	if stopped > 0 {
		if !dry {
			r.blocked.Add(1)
			st.s.deps.Metrics.PolicyAction(r.def.Name, "ingress", semaq.ContentStop)
		}
		return nil, false, semaq.NewAPIError(semaq.ErrPolicy, "policy %s: the message matches its content policy; nothing was stored", r.def.Name)
	}
	if flagged > 0 && !dry {
		r.flagged.Add(1)
		st.s.deps.Metrics.PolicyAction(r.def.Name, "ingress", semaq.ContentFlag)
		st.s.event(semaq.PolicyEvent{Kind: "flag", Policy: r.def.Name, Tenant: m.Envelope.Tenant, Subject: m.Subject})
	}
	if changed && !dry {
		st.s.deps.Metrics.PolicyAction(r.def.Name, "ingress", semaq.ContentMask)
	}
	return out, changed, nil
}

// vaultScope is where m's tokenized values are kept: its session's, its
// request's (Nats-Msg-Id), or a scope of its own.
func vaultScope(m *policy.Message) string {
	if m.Envelope.Session != "" {
		return "s." + m.Envelope.Session
	}
	if m.Envelope.MsgID != "" {
		return "r." + m.Envelope.MsgID
	}
	return "m." + nuid.Next()
}

// dryTokens numbers placeholders for a dry run or a test, storing nothing.
type dryTokens struct {
	n    map[pii.Type]int
	seen map[string]string
}

func (d *dryTokens) Token(t pii.Type, v string) (string, error) {
	k := string(t) + "\x00" + v
	if ph, ok := d.seen[k]; ok {
		return ph, nil
	}
	d.n[t]++
	ph := pii.Placeholder(t, d.n[t])
	d.seen[k] = ph
	return ph, nil
}

var (
	_ policy.Step  = (*Step)(nil)
	_ policy.Idler = (*Step)(nil)
)
