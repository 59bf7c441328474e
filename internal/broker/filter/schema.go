package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/semaq/semaq/internal/editdist"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/registry"
)

// A filter naming a payload field the messages cannot have (a misspelling:
// payload.confidance) would silently match nothing. When the filter's
// subject is bound to a JSON schema, START compares the fields the filter
// names with what every live version of the schema declares: an undeclared
// field is a warning in the response; one that no version allows at all
// (additionalProperties: false) is refused, since every message raises an
// error there. Schemas the walk cannot judge ($ref, combinators, pattern
// properties, other formats) are not judged.

// fieldProblem is a payload field no live schema version declares.
type fieldProblem struct {
	msg string
	// closed: no version allows undeclared fields where this one is, and
	// the filter reads it (not only tests presence): it never evaluates.
	// A field under a non-object type is only warned about.
	closed bool
}

// checkFields compares prog's payload fields with the schemas bound to
// subject. Reads the registry's in-memory state only.
func (f *Service) checkFields(ctx context.Context, subject string, prog *expr.Program) []fieldProblem {
	reg := f.deps.Schemas
	refs := prog.PayloadFields()
	if reg == nil || len(refs) == 0 {
		return nil
	}
	b, ok := reg.BindingFor(subject)
	if !ok {
		return nil
	}
	nums, err := reg.Versions(ctx, b.Subject, false)
	if err != nil || len(nums) == 0 {
		return nil
	}
	var docs []any // newest first
	for _, n := range slices.Backward(nums) {
		v, err := reg.Version(ctx, b.Subject, strconv.Itoa(n), false)
		if err != nil || !strings.EqualFold(v.SchemaType, "JSON") || len(v.References) > 0 {
			return nil
		}
		var doc any
		if json.Unmarshal([]byte(v.Schema), &doc) != nil {
			return nil
		}
		docs = append(docs, doc)
	}
	var out []fieldProblem
	for _, ref := range refs {
		if p := judgeField(docs, ref, b); p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// fieldVerdict is what one schema version says about a field path.
type fieldVerdict struct {
	declared bool // or cannot tell
	at       int  // index of the first undeclared step
	closed   bool
	notObj   string   // the type of path[:at] when it is not an object
	names    []string // properties declared where the step was looked for
}

func judgeField(docs []any, ref expr.FieldRef, b registry.Binding) *fieldProblem {
	var first fieldVerdict
	closed := !ref.Presence
	for i, doc := range docs {
		v := lookupField(doc, ref.Path)
		if v.declared {
			return nil
		}
		if i == 0 {
			first = v
		}
		closed = closed && v.closed && v.notObj == ""
	}
	where := "payload"
	if first.at > 0 {
		where = "payload." + strings.Join(ref.Path[:first.at], ".")
	}
	name := ref.Path[first.at]
	schema := fmt.Sprintf("the schema of %s (registry subject %s)", b.Pattern, b.Subject)
	var msg string
	switch {
	case first.notObj != "":
		msg = fmt.Sprintf("%s: %s makes %s a %s, which has no field %q", ref, schema, where, first.notObj, name)
	case first.closed:
		msg = fmt.Sprintf("%s: %s declares no field %q in %s and allows no others (additionalProperties: false)", ref, schema, name, where)
	default:
		msg = fmt.Sprintf("%s: %s declares no field %q in %s", ref, schema, name, where)
	}
	if s := closest(name, first.names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	if closed {
		msg += "; every message would fail there, so the filter could never match through it"
	} else if !ref.Presence {
		msg += "; messages without it do not match (counted in missing_field)"
	}
	return &fieldProblem{msg: msg, closed: closed}
}

// unjudged are the keywords that can add properties beside "properties";
// a node with one of them is not judged.
var unjudged = []string{"$ref", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if", "patternProperties", "dependentSchemas", "dependencies"}

func lookupField(node any, path []string) fieldVerdict {
	for i, step := range path {
		m, ok := node.(map[string]any)
		if !ok {
			return fieldVerdict{declared: true} // true/false schemas: not judged
		}
		for _, k := range unjudged {
			if _, ok := m[k]; ok {
				return fieldVerdict{declared: true}
			}
		}
		if t, ok := m["type"]; ok && !typeAllows(t, "object") {
			return fieldVerdict{at: i, notObj: typeWords(t)}
		}
		props, _ := m["properties"].(map[string]any)
		if sub, ok := props[step]; ok {
			node = sub
			continue
		}
		closed := m["additionalProperties"] == false || m["unevaluatedProperties"] == false
		_, extra := m["additionalProperties"].(map[string]any)
		if extra || len(props) == 0 && !closed {
			// Any name is allowed, or none is declared: nothing to compare.
			return fieldVerdict{declared: true}
		}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names)
		return fieldVerdict{at: i, closed: closed, names: names}
	}
	return fieldVerdict{declared: true}
}

func typeAllows(t any, want string) bool {
	switch t := t.(type) {
	case string:
		return t == want
	case []any:
		return slices.Contains(t, any(want))
	}
	return true
}

func typeWords(t any) string {
	if s, ok := t.(string); ok {
		return s
	}
	b, _ := json.Marshal(t)
	return string(b)
}

// closest returns the declared name nearest to name by edit distance, if
// it is near enough to be a misspelling.
func closest(name string, names []string) string {
	limit := max(2, len(name)/3)
	best, bestD := "", limit+1
	for _, n := range names {
		if d := editdist.Distance(name, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}
