package cli

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// The registry names each broken compatibility rule with Confluent's
// identifier. A few of them surprise everyone on first contact; for those
// the CLI says why the rule exists and what to do, on stderr, after the
// reasons.
const openModelHint = `the earlier schema is an open content model (no "additionalProperties": false), ` +
	`so messages it accepted may already carry a property of that name with any value, which the new ` +
	`schema's type could refuse (Confluent's rule). Declare the new property as {} (any value), or keep ` +
	`the subject's schemas closed: "semaq schema infer --closed" writes one, and a closed schema may ` +
	`gain optional properties under BACKWARD. Closing an open subject is itself a breaking change: do ` +
	`it once with "semaq schema config SUBJECT --compat none", then set the mode back ` +
	`(docs/schema-registry.md, "Evolving an inferred schema")`

var schemaRuleHints = map[string]string{
	"OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL": openModelHint,
	"REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL": openModelHint + `; a new property must also be optional, ` +
		`or required with a default, for messages written before it to stay valid`,
	"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL": `messages written before this version lack the new ` +
		`property: make it optional, or give it a "default"`,
	"ADDITIONAL_PROPERTIES_REMOVED": `closing an open schema ("additionalProperties": false) refuses ` +
		`messages it accepted before; to close a subject once, set "semaq schema config SUBJECT --compat none", ` +
		`register the closed schema, and set the mode back`,
}

// writeSchemaHints prints the hint of each rule that has one, once, with
// SUBJECT replaced by subject.
func writeSchemaHints(w io.Writer, subject string, rules []string) {
	var done []string
	for _, r := range rules {
		h, ok := schemaRuleHints[r]
		if !ok || slices.Contains(done, r) {
			continue
		}
		done = append(done, r)
		fmt.Fprintf(w, "hint: %s: %s\n", r, strings.ReplaceAll(h, "SUBJECT", subject))
	}
}

var ruleName = regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b`)

// ruleNames finds the rule identifiers in a registry error message.
func ruleNames(msg string) []string {
	return ruleName.FindAllString(msg, -1)
}
