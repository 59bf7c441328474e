package expr

import (
	"slices"
	"strings"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// FieldRef is a payload field an expression names with constant steps from
// payload: payload.a.b, payload["a"].b, payload.?a.b and has(payload.a.b)
// all name Path ["a", "b"]. A step that is not a constant string (an index
// such as payload.items[0], a computed key) ends the path there.
type FieldRef struct {
	Path []string
	// Presence is set when every reference to the path tests for it
	// (has(), payload.?a): a message without the field raises no error
	// there.
	Presence bool
}

// String writes the reference as the expression does: payload.a.b.
func (r FieldRef) String() string { return "payload." + strings.Join(r.Path, ".") }

// PayloadFields returns the payload fields the program names, longest
// paths only (payload.a.b implies payload.a), sorted. Callers compare them
// with a schema to catch misspelled fields, which otherwise just never
// match.
func (p *Program) PayloadFields() []FieldRef { return slices.Clone(p.fields) }

// payloadFields walks a checked AST for constant selections rooted at the
// payload variable.
func payloadFields(a *celast.AST) []FieldRef {
	if a == nil {
		return nil
	}
	refs := map[string]*FieldRef{}
	celast.PostOrderVisit(a.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		path, presence, ok := payloadChain(e)
		if !ok || len(path) == 0 {
			return
		}
		k := strings.Join(path, "\x00")
		if r := refs[k]; r != nil {
			r.Presence = r.Presence && presence
			return
		}
		refs[k] = &FieldRef{Path: path, Presence: presence}
	}))
	var out []FieldRef
	for k, r := range refs {
		longer := false
		for k2 := range refs {
			if k2 != k && strings.HasPrefix(k2, k+"\x00") {
				longer = true
				break
			}
		}
		if !longer {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b FieldRef) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// payloadChain returns the constant path from payload to e, and whether e's
// last step only tests presence.
func payloadChain(e celast.Expr) (path []string, presence, ok bool) {
	switch e.Kind() {
	case celast.IdentKind:
		return nil, false, e.AsIdent() == "payload"
	case celast.SelectKind:
		s := e.AsSelect()
		p, _, ok := payloadChain(s.Operand())
		if !ok {
			return nil, false, false
		}
		return append(p, s.FieldName()), s.IsTestOnly(), true
	case celast.CallKind:
		c := e.AsCall()
		fn := c.FunctionName()
		if (fn != operators.Index && fn != operators.OptIndex && fn != operators.OptSelect) || len(c.Args()) != 2 {
			return nil, false, false
		}
		key := c.Args()[1]
		if key.Kind() != celast.LiteralKind {
			return nil, false, false
		}
		s, isStr := key.AsLiteral().(types.String)
		if !isStr {
			return nil, false, false
		}
		p, _, ok := payloadChain(c.Args()[0])
		if !ok {
			return nil, false, false
		}
		return append(p, string(s)), fn != operators.Index, true
	}
	return nil, false, false
}
