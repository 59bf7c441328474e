package policies

import (
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/streamfilter"
	"github.com/semaq/semaq/semaq"
)

func TestCheckRule(t *testing.T) {
	tokens := []string{semaq.PolicyStreamTokens}
	for _, tc := range []struct {
		name string
		r    semaq.PolicyRule
		want string // "" accepts
	}{
		{"ok", semaq.PolicyRule{Name: "pii-in", Subjects: []string{"ai.>"}, Redact: []string{"email", "cn-id"}, Action: "tokenize"}, ""},
		{"ok tokens", semaq.PolicyRule{Name: "out", Streams: tokens, Redact: []string{"secret"}, Words: []string{"a b"}, OnMatch: "stop"}, ""},
		{"bad name", semaq.PolicyRule{Name: "1x", Subjects: []string{"a"}, Redact: []string{"email"}}, "start with a letter"},
		{"name with a dot", semaq.PolicyRule{Name: "a.b", Subjects: []string{"a"}, Redact: []string{"email"}}, "has '.'"},
		{"nowhere", semaq.PolicyRule{Name: "x", Redact: []string{"email"}}, "attach it somewhere"},
		{"broker subject", semaq.PolicyRule{Name: "x", Subjects: []string{"$SQ.>"}, Redact: []string{"email"}}, "broker's own"},
		{"does nothing", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}}, "does nothing"},
		{"unknown type", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"passport"}}, `unknown type "passport"`},
		{"type twice", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"ip", "ip"}}, "twice"},
		{"bad action", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"ip"}, Action: "erase"}, `action "erase"`},
		{"action without types", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Words: []string{"w"}, Action: "mask"}, "give types"},
		{"tokenize on tokens", semaq.PolicyRule{Name: "x", Streams: tokens, Redact: []string{"ip"}, Action: "tokenize"}, "act at the ingress"},
		{"block per type on tokens", semaq.PolicyRule{Name: "x", Streams: tokens, Redact: []string{"ip"}, Actions: map[string]string{"ip": "block"}}, "act at the ingress"},
		{"per type of no type", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"ip"}, Actions: map[string]string{"card": "block"}}, "not one of the types"},
		{"empty word", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Words: []string{"ok", " "}}, "entry 2 is empty"},
		{"bad pattern", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Patterns: []string{"(a"}}, "pattern 1"},
		{"empty match", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Patterns: []string{"a*"}}, "empty string"},
		{"bad on_match", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Words: []string{"w"}, OnMatch: "drop"}, `on_match "drop"`},
		{"on_match without words", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"ip"}, OnMatch: "stop"}, "give --block-words"},
		{"bad path", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"ip"}, Paths: []string{"a..b"}}, "empty segment"},
		{"bad tenant", semaq.PolicyRule{Name: "x", Subjects: []string{"a"}, Redact: []string{"ip"}, Tenant: "a b"}, "tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRule(&tc.r)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestCompileRuleManyPatternsAndSecrets(t *testing.T) {
	d := semaq.PolicyRule{Name: "out", Streams: []string{semaq.PolicyStreamTokens, "DEMO"}, Redact: []string{"secret", "email"},
		Patterns: []string{`ticket-[0-9]+`, `case [0-9]+`}, Words: []string{"darn"}}
	if err := checkRule(&d); err != nil {
		t.Fatal(err)
	}
	r, err := compileRule(d, ruleEnv{hashKey: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if !r.tokens || !r.ingress || len(r.pii) < 3 || len(r.content) != 3 {
		t.Fatalf("compiled: tokens %v ingress %v, %d pii rules, %d content rules", r.tokens, r.ingress, len(r.pii), len(r.content))
	}
	set, err := streamfilter.Compile(append(r.pii, r.content...), streamfilter.Options{MaxHold: maxHold})
	if err != nil {
		t.Fatal(err)
	}
	st := set.Stream()
	out, _, _, err := st.Write("see ticket-12 and case 7, mail a@b.io, darn. ")
	if err != nil {
		t.Fatal(err)
	}
	rest, _, _ := st.Flush()
	if got := out + rest; got != "see *** and ***, mail [EMAIL], ***. " {
		t.Fatalf("filtered %q", got)
	}
	// Tokenize needs the vault key.
	d = semaq.PolicyRule{Name: "tok", Subjects: []string{"a"}, Redact: []string{"email"}, Action: "tokenize"}
	if _, err := compileRule(d, ruleEnv{}); err == nil || !strings.Contains(err.Error(), "pii_vault_key_file") {
		t.Fatalf("tokenize without a vault key: %v", err)
	}
}
