package policies

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/pii"
	"github.com/semaq/semaq/internal/streamfilter"
	"github.com/semaq/semaq/semaq"
)

// Handlers serves $SQ.API.POLICY.* and $SQ.API.PLUGIN.*. Only admins reach
// the management calls (their NATS permissions); RESTORE is every
// publisher's, reader's and service's, and checks the tenant itself.
func (s *Store) Handlers() api.Handlers {
	h := api.Handlers{
		semaq.APIPolicyAdd:     api.Op(s.log, "policy add", s.add, nil),
		semaq.APIPolicyList:    api.Op(s.log, "policy list", s.list, nil),
		semaq.APIPolicyGet:     api.Op(s.log, "policy get", s.get, nil),
		semaq.APIPolicyDelete:  api.Op(s.log, "policy delete", s.remove, nil),
		semaq.APIPolicyTest:    api.Op(s.log, "policy test", s.test, nil),
		semaq.APIPolicyRestore: api.Op(s.log, "policy restore", s.restore, nil),
	}
	return h.Merge(s.pluginHandlers())
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

func badPolicy(name string, err error) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrBadPolicy, "policy %s: %v", name, err)
}

func (s *Store) add(ctx context.Context, req *semaq.PolicyAddRequest) (out any, err error) {
	defer s.deps.Audit(ctx, semaq.AuditOpPolicyAdd, req.Name)(&out, &err)
	d := req.PolicyRule
	if err := checkRule(&d); err != nil {
		return nil, badPolicy(d.Name, err)
	}
	if _, err := compileRule(d, s.ruleEnv()); err != nil {
		return nil, badPolicy(d.Name, err)
	}
	if t := s.Table(); t.rule(d.Name) == nil && len(t.rules) >= semaq.MaxPolicies {
		return nil, badPolicy(d.Name, errors.New("the node keeps at most 256 rules; remove one first"))
	}
	val, err := json.Marshal(d)
	if err != nil {
		return nil, badPolicy(d.Name, err)
	}
	var rev uint64
	if req.Replace {
		rev, err = s.kv.Put(ctx, rulePrefix+d.Name, val)
	} else {
		rev, err = s.kv.Create(ctx, rulePrefix+d.Name, val)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, semaq.NewAPIError(semaq.ErrPolicyExists, "policy %s already exists; remove it first or replace it", d.Name)
		}
	}
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "policy %s: storing: %v", d.Name, err)
	}
	t, err := s.waitRev(ctx, rev)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "policy %s stored but not yet in effect on this node: %v", d.Name, err)
	}
	s.applied(ctx, rev)
	s.log.Info("policy added", "policy", d.Name, "revision", rev)
	if r := t.rule(d.Name); r != nil && r.rev >= rev {
		return r.info(), nil
	}
	return semaq.PolicyInfo{PolicyRule: d, Revision: rev, Created: time.Now().UTC()}, nil
}

func (s *Store) list(_ context.Context, _ *struct{}) (any, error) {
	t := s.Table()
	out := semaq.PolicyListResponse{Policies: make([]semaq.PolicyInfo, 0, len(t.rules))}
	for _, r := range t.rules {
		out.Policies = append(out.Policies, r.info())
	}
	for _, b := range t.broken {
		if b.rule != nil {
			out.Policies = append(out.Policies, semaq.PolicyInfo{PolicyRule: *b.rule, Created: b.created, Revision: b.rev, Error: b.err})
		}
	}
	slices.SortStableFunc(out.Policies, func(a, b semaq.PolicyInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *Store) get(_ context.Context, req *semaq.PolicyNameRequest) (any, error) {
	t := s.Table()
	if r := t.rule(req.Name); r != nil {
		return r.info(), nil
	}
	for _, b := range t.broken {
		if b.rule != nil && b.name == req.Name {
			return semaq.PolicyInfo{PolicyRule: *b.rule, Created: b.created, Revision: b.rev, Error: b.err}, nil
		}
	}
	return nil, semaq.NewAPIError(semaq.ErrPolicyNotFound, "policy %s not found", req.Name)
}

func (s *Store) remove(ctx context.Context, req *semaq.PolicyNameRequest) (out any, err error) {
	defer s.deps.Audit(ctx, semaq.AuditOpPolicyDelete, req.Name)(&out, &err)
	if err := checkName("policy", req.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "policy delete: %v", err)
	}
	if err := s.deleteKey(ctx, rulePrefix+req.Name, "policy", req.Name, semaq.ErrPolicyNotFound); err != nil {
		return nil, err
	}
	s.log.Info("policy removed", "policy", req.Name)
	return semaq.PolicyDeleteResponse{Deleted: true}, nil
}

// deleteKey deletes key, then waits until this node and the cluster have
// applied the delete.
func (s *Store) deleteKey(ctx context.Context, key, what, name string, notFound *semaq.APIError) error {
	if _, err := s.kv.Get(ctx, key); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return semaq.NewAPIError(notFound, "%s %s not found", what, name)
		}
		return semaq.NewAPIError(semaq.ErrUnavailable, "%s %s: reading: %v", what, name, err)
	}
	if err := s.kv.Delete(ctx, key); err != nil {
		return semaq.NewAPIError(semaq.ErrUnavailable, "%s %s: deleting: %v", what, name, err)
	}
	rev, err := s.lastRevision(ctx)
	if err != nil {
		return semaq.NewAPIError(semaq.ErrUnavailable, "%s %s deleted; reading the bucket status: %v", what, name, err)
	}
	if _, err := s.waitRev(ctx, rev); err != nil {
		return semaq.NewAPIError(semaq.ErrUnavailable, "%s %s deleted but still in effect on this node: %v", what, name, err)
	}
	s.applied(ctx, rev)
	return nil
}

// maxTestBytes bounds a test's sample.
const maxTestBytes = 1 << 20

// test runs a rule on a sample: what the ingress would do with it (the
// vault untouched: tokenize shows the placeholders it would give), and
// for a rule on token streams, what the stream's filter would.
func (s *Store) test(_ context.Context, req *semaq.PolicyTestRequest) (any, error) {
	var d semaq.PolicyRule
	switch {
	case req.Rule != nil && req.Name != "":
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "policy test: name a stored rule or give one, not both")
	case req.Rule != nil:
		d = *req.Rule
		if d.Name == "" {
			d.Name = "test"
		}
		if len(d.Subjects)+len(d.Streams) == 0 {
			d.Subjects = []string{"test"}
		}
		if err := checkRule(&d); err != nil {
			return nil, badPolicy(d.Name, err)
		}
	default:
		r := s.Table().rule(req.Name)
		if r == nil {
			return nil, semaq.NewAPIError(semaq.ErrPolicyNotFound, "policy %s not found on this node", req.Name)
		}
		d = r.def
	}
	if len(req.Data) > maxTestBytes {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "policy test: a sample of %d bytes; at most %d", len(req.Data), maxTestBytes)
	}
	env := s.ruleEnv()
	env.vault = true // a test stores nothing
	r, err := compileRule(d, env)
	if err != nil {
		return nil, badPolicy(d.Name, err)
	}
	out := semaq.PolicyTestResponse{Data: req.Data, Findings: []semaq.PolicyFinding{}}
	data := req.Data
	if r.redactor != nil {
		red, found, changed, err := r.redactor.Redact(data, &dryTokens{n: map[pii.Type]int{}, seen: map[string]string{}})
		var be *pii.BlockedError
		switch {
		case errors.As(err, &be):
			out.Findings = append(out.Findings, semaq.PolicyFinding{Type: string(be.Type), Path: be.Path, Action: semaq.PIIBlock, Rule: d.Name})
			out.Blocked = semaq.NewAPIError(semaq.ErrPIIBlocked, "policy %s: %s holds a %s, which the policy blocks", d.Name, orDefault(be.Path, "the payload"), be.Type).Description
			return out, nil
		case err != nil:
			return nil, badPolicy(d.Name, err)
		}
		for _, f := range found {
			out.Findings = append(out.Findings, semaq.PolicyFinding{Type: string(f.Type), Path: f.Path, Action: string(f.Action), Rule: d.Name})
		}
		if changed {
			data = red
		}
	}
	if len(r.content) > 0 {
		set, err := r.contentSet()
		if err != nil {
			return nil, badPolicy(d.Name, err)
		}
		var stop bool
		red, _, err := pii.RewriteStrings(data, d.Paths, func(v string) (string, error) {
			fs := set.Stream()
			o, evs, st, err := fs.Write(v)
			if err != nil {
				return "", err
			}
			rest, evs2, st2 := fs.Flush()
			for _, e := range append(evs, evs2...) {
				out.Findings = append(out.Findings, semaq.PolicyFinding{Type: "content", Action: contentName(e.Action), Rule: d.Name})
			}
			stop = stop || st || st2
			return o + rest, nil
		})
		if err != nil {
			return nil, badPolicy(d.Name, err)
		}
		if stop {
			if r.tokens {
				out.Stopped = "policy " + d.Name + " would stop the token stream here (finish reason " + semaq.FinishContentFilter + ")"
			} else {
				out.Blocked = "policy " + d.Name + ": the message matches its content policy"
			}
		}
		data = red
	}
	out.Data = data
	return out, nil
}

func contentName(a streamfilter.Action) string {
	switch a {
	case streamfilter.Stop:
		return semaq.ContentStop
	case streamfilter.Flag:
		return semaq.ContentFlag
	}
	return semaq.ContentMask
}

// maxRestoreText bounds a restore's text.
const maxRestoreText = 1 << 20

// restore puts back the values a scope's placeholders stand for, for the
// tenant the scope is of. A user acts for its own tenant; admins,
// services, the node and everyone with auth off name one. Workers never:
// they are who tokenize keeps the values from.
func (s *Store) restore(ctx context.Context, req *semaq.PolicyRestoreRequest) (any, error) {
	m := s.deps.Metrics
	tenant := req.Tenant
	if s.deps.Principal != nil {
		p := s.deps.Principal(api.RequestHeader(ctx))
		if p.Who == api.User {
			switch p.Role {
			case semaq.RoleAdmin, semaq.RoleService:
			case semaq.RolePublisher, semaq.RoleReader:
				if req.Tenant != "" && req.Tenant != p.Tenant {
					m.PIIVault("restore", "forbidden")
					return nil, semaq.NewAPIError(semaq.ErrForbidden, "policy restore: a user of tenant %q restores its own tenant's values only", p.Tenant)
				}
				tenant = p.Tenant
			default:
				m.PIIVault("restore", "forbidden")
				return nil, semaq.NewAPIError(semaq.ErrForbidden, "policy restore: role %s may not restore tokenized values", p.Role)
			}
		}
	}
	if req.Scope == "" || len(req.Scope) > 512 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "policy restore: scope: 1 to 512 bytes (the message's %s header)", semaq.HdrPIIScope)
	}
	if len(req.Text) > maxRestoreText {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "policy restore: text of %d bytes; at most %d", len(req.Text), maxRestoreText)
	}
	values, err := s.vault.restore(ctx, tenant, req.Scope)
	switch {
	case errors.Is(err, errNoVaultKey):
		m.PIIVault("restore", "error")
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "policy restore: %v", err)
	case err != nil:
		m.PIIVault("restore", "error")
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "policy restore: reading the vault: %v", err)
	case values == nil:
		m.PIIVault("restore", "not_found")
		return nil, semaq.NewAPIError(semaq.ErrVaultNotFound, "policy restore: no tokenized values for scope %q in tenant %q: expired after %v, or never there", req.Scope, tenant, s.deps.VaultTTL)
	}
	m.PIIVault("restore", "ok")
	if req.Values {
		return semaq.PolicyRestoreResponse{Values: values, Restored: len(values)}, nil
	}
	n := 0
	text := pii.Restore(req.Text, func(ph string) (string, bool) {
		v, ok := values[ph]
		if ok {
			n++
		}
		return v, ok
	})
	return semaq.PolicyRestoreResponse{Text: text, Restored: n}, nil
}
