package jsonfmt

import "github.com/santhosh-tekuri/jsonschema/v6"

// Before draft 2019-09 a "$ref" replaces the schema object it sits in:
// "All other properties in a "$ref" object MUST be ignored" (drafts 04,
// 06 and 07, section 8.3 of draft-07's core). The library stops at such a
// $ref, but only after checking "const" (a draft-06 keyword it compiles
// beside the $ref anyway), so {"$ref": ..., "const": 1} refused 2 there
// while the fast path, the compatibility model and the specification
// ignore the const. jsonIgnoreRefSiblings drops those constants from the
// compiled schema, so every path reads the schema as written.
func jsonIgnoreRefSiblings(root *jsonschema.Schema) {
	jsonEachCompiled(root, func(s *jsonschema.Schema) {
		if s.Ref != nil && s.DraftVersion < 2019 {
			s.Const = nil
		}
	})
}

// jsonEachCompiled calls f once for every schema reachable from s.
func jsonEachCompiled(s *jsonschema.Schema, f func(*jsonschema.Schema)) {
	seen := map[*jsonschema.Schema]bool{}
	var walk func(*jsonschema.Schema)
	walk = func(s *jsonschema.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		f(s)
		for _, x := range []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else, s.PropertyNames,
			s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema} {
			walk(x)
		}
		if s.DynamicRef != nil {
			walk(s.DynamicRef.Ref)
		}
		for _, list := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf, s.PrefixItems} {
			for _, x := range list {
				walk(x)
			}
		}
		for _, x := range s.Properties {
			walk(x)
		}
		for _, x := range s.PatternProperties {
			walk(x)
		}
		for _, x := range s.DependentSchemas {
			walk(x)
		}
		for _, d := range s.Dependencies {
			if x, ok := d.(*jsonschema.Schema); ok {
				walk(x)
			}
		}
		for _, v := range []any{s.AdditionalProperties, s.AdditionalItems, s.Items} {
			switch x := v.(type) {
			case *jsonschema.Schema:
				walk(x)
			case []*jsonschema.Schema:
				for _, y := range x {
					walk(y)
				}
			}
		}
	}
	walk(s)
}
