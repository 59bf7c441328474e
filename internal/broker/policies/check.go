package policies

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/semaq/semaq/semaq"
)

// piiTypes are the entity types a rule may redact, as docs/policy.md
// lists them.
var piiTypes = []string{semaq.PIIEmail, semaq.PIIPhone, semaq.PIICNID, semaq.PIICard, semaq.PIIIBAN, semaq.PIISSN, semaq.PIIIP, semaq.PIISecret}

// checkName accepts rule and plugin names: 1 to 64 letters, digits, '-'
// and '_', starting with a letter; one KV key token and one subject token.
func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("%s name is empty", what)
	}
	if len(name) > 64 {
		return fmt.Errorf("%s name %q is longer than 64 bytes", what, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if i == 0 && !letter {
			return fmt.Errorf("%s name %q does not start with a letter", what, name)
		}
		if !(letter || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%s name %q has %q at byte %d; use letters, digits, '-' and '_'", what, name, c, i)
		}
	}
	return nil
}

// checkAttach checks where a rule or plugin attaches: subjects, streams
// and a tenant.
func checkAttach(subjects, streams []string, tenant string, tokensOK bool) error {
	if len(subjects)+len(streams) == 0 {
		return fmt.Errorf("attach it somewhere: --subjects (ingress subject patterns) or --streams (stream names, %q for token streams)", semaq.PolicyStreamTokens)
	}
	if len(subjects) > 64 || len(streams) > 64 {
		return fmt.Errorf("at most 64 subjects and 64 streams")
	}
	for _, s := range subjects {
		if err := semaq.CheckSubject(s, true); err != nil {
			return err
		}
		if strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_SQ_") {
			return fmt.Errorf("subject %q is the broker's own; attach to stream subjects", s)
		}
	}
	for _, s := range streams {
		if s == semaq.PolicyStreamTokens {
			if !tokensOK {
				return fmt.Errorf("streams: %q (token streams) is not a stage of this kind", s)
			}
			continue
		}
		if err := semaq.CheckStreamName(s); err != nil {
			return fmt.Errorf("streams: %w", err)
		}
	}
	if tenant != "" {
		if err := semaq.CheckName(tenant); err != nil {
			return fmt.Errorf("tenant: %w", err)
		}
	}
	return nil
}

// checkRule refuses a rule the node could not run, naming the field.
func checkRule(r *semaq.PolicyRule) error {
	if err := checkName("policy", r.Name); err != nil {
		return err
	}
	if err := checkAttach(r.Subjects, r.Streams, r.Tenant, true); err != nil {
		return err
	}
	tokens := slices.Contains(r.Streams, semaq.PolicyStreamTokens)
	if len(r.Redact)+len(r.Words)+len(r.Patterns) == 0 {
		return fmt.Errorf("the rule does nothing: give --redact types, --block-words or --patterns")
	}
	seen := map[string]bool{}
	for _, t := range r.Redact {
		if !slices.Contains(piiTypes, t) {
			return fmt.Errorf("redact: unknown type %q; known: %s", t, strings.Join(piiTypes, ", "))
		}
		if seen[t] {
			return fmt.Errorf("redact: %q twice", t)
		}
		seen[t] = true
	}
	if r.Action != "" && len(r.Redact) == 0 {
		return fmt.Errorf("action is what --redact types get; give types")
	}
	if err := checkPIIAction("action", r.Action, tokens); err != nil {
		return err
	}
	for t, a := range r.Actions {
		if !seen[t] {
			return fmt.Errorf("actions: %q is not one of the types redacted (%s)", t, strings.Join(r.Redact, ", "))
		}
		if err := checkPIIAction("actions["+t+"]", a, tokens); err != nil {
			return err
		}
	}
	if len(r.Paths) > semaq.MaxPolicyPaths {
		return fmt.Errorf("paths: %d; at most %d", len(r.Paths), semaq.MaxPolicyPaths)
	}
	for _, p := range r.Paths {
		if err := checkPath(p); err != nil {
			return err
		}
	}
	if len(r.Paths) > 0 && len(r.Redact) == 0 && len(r.Words)+len(r.Patterns) == 0 {
		return fmt.Errorf("paths select what --redact searches; give types")
	}
	if len(r.Words) > semaq.MaxPolicyWords {
		return fmt.Errorf("words: %d; at most %d", len(r.Words), semaq.MaxPolicyWords)
	}
	n := 0
	for i, w := range r.Words {
		if strings.TrimSpace(w) == "" {
			return fmt.Errorf("words: entry %d is empty", i+1)
		}
		n += len(w)
	}
	if n > semaq.MaxPolicyWordBytes {
		return fmt.Errorf("words: %d bytes; at most %d", n, semaq.MaxPolicyWordBytes)
	}
	if len(r.Patterns) > semaq.MaxPolicyPatterns {
		return fmt.Errorf("patterns: %d; at most %d", len(r.Patterns), semaq.MaxPolicyPatterns)
	}
	for i, p := range r.Patterns {
		if len(p) > 1024 {
			return fmt.Errorf("patterns: pattern %d is longer than 1024 bytes", i+1)
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return fmt.Errorf("patterns: pattern %d: %v", i+1, err)
		}
		if re.MatchString("") {
			return fmt.Errorf("patterns: pattern %d matches the empty string", i+1)
		}
	}
	switch r.OnMatch {
	case "", semaq.ContentMask, semaq.ContentStop, semaq.ContentFlag:
	default:
		return fmt.Errorf("on_match %q: use %s, %s or %s", r.OnMatch, semaq.ContentMask, semaq.ContentStop, semaq.ContentFlag)
	}
	if r.OnMatch != "" && len(r.Words)+len(r.Patterns) == 0 {
		return fmt.Errorf("on_match is what a word or pattern match does; give --block-words or --patterns")
	}
	return nil
}

// checkPIIAction checks one PII action; token streams can only mask or
// hash what passes by (a tokenized value there has no one to restore it
// for, and a stream already sent cannot be refused).
func checkPIIAction(field, a string, tokens bool) error {
	switch a {
	case "", semaq.PIIMask, semaq.PIIHash:
	case semaq.PIITokenize, semaq.PIIBlock:
		if tokens {
			return fmt.Errorf("%s %q: on token streams a rule masks or hashes; tokenize and block act at the ingress", field, a)
		}
	default:
		return fmt.Errorf("%s %q: use %s, %s, %s or %s", field, a, semaq.PIIMask, semaq.PIIHash, semaq.PIITokenize, semaq.PIIBlock)
	}
	return nil
}

// checkPath checks a dotted JSON path: segments of a key or '*'.
func checkPath(p string) error {
	if p == "" || len(p) > 256 {
		return fmt.Errorf("path %q: 1 to 256 bytes", p)
	}
	for seg := range strings.SplitSeq(p, ".") {
		if seg == "" {
			return fmt.Errorf("path %q has an empty segment", p)
		}
	}
	return nil
}

// checkPlugin refuses a plugin record the node could not run.
func checkPlugin(p *semaq.Plugin) error {
	if err := checkName("plugin", p.Name); err != nil {
		return err
	}
	switch p.Stage {
	case semaq.PluginStageIngress, semaq.PluginStageFilter, semaq.PluginStageTokens:
	default:
		return fmt.Errorf("stage %q: use %s, %s or %s", p.Stage, semaq.PluginStageIngress, semaq.PluginStageFilter, semaq.PluginStageTokens)
	}
	switch {
	case p.Stage == semaq.PluginStageIngress:
		if err := checkAttach(p.Subjects, nil, p.Tenant, false); err != nil {
			return err
		}
	case len(p.Subjects) > 0:
		// A filter plugin judges what a subscription names it for, a
		// tokens plugin every token stream (of its tenant).
		return fmt.Errorf("subjects: a %s plugin is not attached to subjects", p.Stage)
	case p.Tenant != "":
		if err := semaq.CheckName(p.Tenant); err != nil {
			return fmt.Errorf("tenant: %w", err)
		}
	}
	if p.Timeout < 0 || p.Timeout > semaq.MaxPluginTime {
		return fmt.Errorf("timeout %v: 0 (the default, %v) up to %v", p.Timeout, semaq.DefaultPluginTime, semaq.MaxPluginTime)
	}
	if p.MemoryMiB < 0 || p.MemoryMiB > 1024 {
		return fmt.Errorf("memory %d MiB: 0 (the default) up to 1024", p.MemoryMiB)
	}
	switch p.OnFailure {
	case "", semaq.PluginFailReject, semaq.PluginFailPass:
	default:
		return fmt.Errorf("on_failure %q: use %s or %s", p.OnFailure, semaq.PluginFailReject, semaq.PluginFailPass)
	}
	if p.FailAfter < 0 || p.FailAfter > 1_000_000 {
		return fmt.Errorf("fail_after %d: 0 (the default, 10) up to 1000000", p.FailAfter)
	}
	if p.Size <= 0 || p.Size > semaq.MaxPluginBytes {
		return fmt.Errorf("size %d: 1 byte up to %d", p.Size, semaq.MaxPluginBytes)
	}
	if len(p.SHA256) != 64 || strings.Trim(p.SHA256, "0123456789abcdef") != "" {
		return fmt.Errorf("sha256 %q: 64 lower-case hex digits", p.SHA256)
	}
	if len(p.Signature) > 128 {
		return fmt.Errorf("signature: longer than 128 bytes")
	}
	return nil
}

// pluginTimeout is p's call budget.
func pluginTimeout(p *semaq.Plugin) time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return semaq.DefaultPluginTime
}
