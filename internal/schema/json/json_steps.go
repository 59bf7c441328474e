package jsonfmt

import (
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/semaq/semaq/internal/schema"
)

// jsonStepsPerValue is the allowance each payload value adds to
// MaxValidationSteps: large payloads cost proportionally more, a small
// payload cannot buy exponential work.
const jsonStepsPerValue = 16

// jsonStepBudget is how many schema nodes validating a payload of values
// JSON values may visit. l has its defaults.
func jsonStepBudget(l schema.Limits, values int) int {
	return l.MaxValidationSteps + jsonStepsPerValue*values
}

func jsonOverBudgetError(l schema.Limits, values int) *schema.ValidationError {
	return &schema.ValidationError{Rule: "MaxValidationSteps", Message: fmt.Sprintf(
		"validating this payload would visit more than %d schema nodes (MaxValidationSteps %d + %d per payload value, %d values): the schema applies its subschemas to one value too many times ($ref/allOf/anyOf/oneOf fan-out); refused before validation",
		jsonStepBudget(l, values), l.MaxValidationSteps, jsonStepsPerValue, values)}
}

// jsonLibraryWithin reports whether the library's validation of v under s
// visits at most budget schema nodes. It walks what the library walks
// when it explains a failure — every branch of allOf, anyOf, oneOf, both
// then and else — without evaluating any assertion, and stops at the
// budget. A $ref loop that consumes no input is cut where the library
// cuts it (it reports a cycle); $dynamicRef and $recursiveRef are
// followed to their static target.
func jsonLibraryWithin(s *jsonschema.Schema, v any, budget int) bool {
	w := jsonCostWalker{left: budget}
	w.visit(s, v)
	return w.left >= 0
}

type jsonCostWalker struct {
	left int
	// here is the schemas applied to the current value, for the cycle
	// check; a new value starts it afresh.
	here []*jsonschema.Schema
}

func (w *jsonCostWalker) visit(s *jsonschema.Schema, v any) {
	if s == nil || w.left < 0 {
		return
	}
	// The cycle check scans here; charge the scan so a long chain of
	// in-place references costs its length.
	w.left -= 1 + len(w.here)/8
	if w.left < 0 || s.Bool != nil {
		return
	}
	for _, h := range w.here {
		if h == s {
			return
		}
	}
	w.here = append(w.here, s)
	defer func() { w.here = w.here[:len(w.here)-1] }()

	w.visit(s.Ref, v)
	w.visit(s.RecursiveRef, v)
	if s.DynamicRef != nil {
		w.visit(s.DynamicRef.Ref, v)
	}
	w.visit(s.Not, v)
	for _, list := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf} {
		for _, x := range list {
			w.visit(x, v)
		}
	}
	w.visit(s.If, v)
	w.visit(s.Then, v)
	w.visit(s.Else, v)

	switch x := v.(type) {
	case map[string]any:
		for k, d := range s.Dependencies {
			if ds, ok := d.(*jsonschema.Schema); ok {
				if _, present := x[k]; present {
					w.visit(ds, v)
				}
			}
		}
		for k, ds := range s.DependentSchemas {
			if _, present := x[k]; present {
				w.visit(ds, v)
			}
		}
		for k, m := range x {
			w.child(func() {
				evaluated := false
				if p, ok := s.Properties[k]; ok {
					evaluated = true
					w.visit(p, m)
				}
				for re, p := range s.PatternProperties {
					w.left -= 1
					if re.MatchString(k) {
						evaluated = true
						w.visit(p, m)
					}
				}
				if a, ok := s.AdditionalProperties.(*jsonschema.Schema); ok && !evaluated {
					w.visit(a, m)
				}
				w.visit(s.UnevaluatedProperties, m)
			})
			if s.PropertyNames != nil {
				w.child(func() { w.visit(s.PropertyNames, k) })
			}
			if w.left < 0 {
				return
			}
		}
	case []any:
		var prefix []*jsonschema.Schema
		var rest *jsonschema.Schema
		switch items := s.Items.(type) {
		case *jsonschema.Schema:
			rest = items
		case []*jsonschema.Schema:
			prefix = items
			rest, _ = s.AdditionalItems.(*jsonschema.Schema)
		}
		if s.PrefixItems != nil {
			prefix = s.PrefixItems
		}
		if s.Items2020 != nil {
			rest = s.Items2020
		}
		for i, m := range x {
			w.child(func() {
				if i < len(prefix) {
					w.visit(prefix[i], m)
				} else {
					w.visit(rest, m)
				}
				w.visit(s.Contains, m)
				w.visit(s.UnevaluatedItems, m)
			})
			if w.left < 0 {
				return
			}
		}
	}
}

// child runs f for a value below the current one: the cycle check
// starts afresh there.
func (w *jsonCostWalker) child(f func()) {
	saved := w.here
	w.here = nil
	f()
	w.here = saved
}
