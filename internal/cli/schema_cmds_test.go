package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Under BACKWARD, schemaV2 (an optional property added to a closed model)
// may follow schemaV1; schemaBad (amount's type changed) may not.
const (
	schemaV1  = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"number"}},"required":["id"],"additionalProperties":false}`
	schemaV2  = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"number"},"note":{"type":"string"}},"required":["id"],"additionalProperties":false}`
	schemaBad = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"string"}},"required":["id"],"additionalProperties":false}`
)

// schemaFiles writes the test schemas to a temporary directory.
func schemaFiles(t *testing.T) (v1, v2, bad string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("v1.json", schemaV1), write("v2.json", schemaV2), write("bad.json", schemaBad)
}

func TestSchemaCLIRegisterGetLs(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, _, _ := schemaFiles(t)

	if out := mustSemaq(t, url, "", "schema", "ls"); strings.TrimSpace(out) != "No subjects." {
		t.Errorf("schema ls on an empty registry = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("schema ls --json on an empty registry = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "register", "orders", v1); out != "Registered orders version 1: schema id 1\n" {
		t.Errorf("register v1 = %q", out)
	}
	// From stdin, with --json.
	var reg semaq.SchemaRegisterResponse
	out := mustSemaq(t, url, schemaV2, "schema", "register", "orders", "-", "--type", "JSON", "--json")
	if err := json.Unmarshal([]byte(out), &reg); err != nil || reg.ID != 2 || reg.Version != 2 {
		t.Errorf("register v2 from stdin --json = %q (%v)", out, err)
	}
	// The same schema under another subject keeps its id.
	if out := mustSemaq(t, url, "", "schema", "register", "archive", v1); out != "Registered archive version 1: schema id 1\n" {
		t.Errorf("register v1 under archive = %q", out)
	}

	if out := mustSemaq(t, url, "", "schema", "ls"); out != "archive\norders\n" {
		t.Errorf("schema ls = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "ls", "orders"); out != "1\n2\n" {
		t.Errorf("schema ls orders = %q", out)
	}

	// get: the text on stdout, what it is on stderr.
	r := runSemaq(t, url, "", "schema", "get", "orders")
	if r.code != 0 || r.stdout != schemaV2+"\n" || !strings.Contains(r.stderr, "Subject orders version 2: schema id 2 (JSON)") {
		t.Errorf("schema get orders: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	if out := mustSemaq(t, url, "", "schema", "get", "orders", "--version", "1"); out != schemaV1+"\n" {
		t.Errorf("schema get orders --version 1 = %q", out)
	}
	r = runSemaq(t, url, "", "schema", "get", "--id", "2")
	if r.code != 0 || r.stdout != schemaV2+"\n" || !strings.Contains(r.stderr, "Schema id 2 (JSON)") {
		t.Errorf("schema get --id 2: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	var s semaq.Schema
	out = mustSemaq(t, url, "", "schema", "get", "orders", "--version", "latest", "--json")
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Subject != "orders" || s.Version != 2 || s.ID != 2 || s.Type != "JSON" || s.Text != schemaV2 {
		t.Errorf("schema get --json = %q (%v)", out, err)
	}

	mustFailSemaq(t, url, "Subject 'nope' not found", "schema", "get", "nope")
	mustFailSemaq(t, url, "Version 9 not found", "schema", "get", "orders", "--version", "9")
	mustFailSemaq(t, url, "Schema 99 not found", "schema", "get", "--id", "99")
	mustFailSemaq(t, url, "Subject 'nope' not found", "schema", "ls", "nope")
	if r := runSemaq(t, url, `{"type":`, "schema", "register", "broken", "-"); r.code != 1 || !strings.HasPrefix(r.stderr, "semaq: Invalid schema") {
		t.Errorf("register an unparsable schema: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestSchemaCLIRegisterIncompatible(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, _, bad := schemaFiles(t)
	mustSemaq(t, url, "", "schema", "register", "orders", v1)
	r := mustFailSemaq(t, url, "incompatible", "schema", "register", "orders", bad)
	if r.code != 1 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "amount") {
		t.Errorf("incompatible register: exit %d, stderr %q: want exit 1 and one line naming amount", r.code, r.stderr)
	}
}

func TestSchemaCLICheck(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, v2, bad := schemaFiles(t)
	mustSemaq(t, url, "", "schema", "register", "orders", v1)

	if out := mustSemaq(t, url, "", "schema", "check", "orders", v2); out != "compatible\n" {
		t.Errorf("check v2 = %q", out)
	}
	if out := mustSemaq(t, url, schemaV2, "schema", "check", "orders", "-", "--version", "latest"); out != "compatible\n" {
		t.Errorf("check v2 from stdin against latest = %q", out)
	}
	r := runSemaq(t, url, "", "schema", "check", "orders", bad)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 1 || len(lines) == 0 || !strings.Contains(lines[0], "amount") || !strings.Contains(r.stderr, "semaq: incompatible with subject orders") {
		t.Errorf("check bad: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	for _, l := range lines {
		if !strings.Contains(l, " at ") {
			t.Errorf("reason line %q is not RULE at PATH: message", l)
		}
	}
	// Anything else that goes wrong exits 2, so a CI gate tells it apart.
	for _, tc := range []struct {
		want string
		args []string
	}{
		{`registry subject "nope" not found`, []string{"nope", v2, "--version", "1"}},
		{`registry subject "nope" not found`, []string{"nope", v2}},
		{`--type "xml"`, []string{"orders", v2, "--type", "xml"}},
		{`--version "0"`, []string{"orders", v2, "--version", "0"}},
		{"no such file", []string{"orders", filepath.Join(t.TempDir(), "missing.json")}},
		{"unknown flag", []string{"orders", v2, "--bogus"}},
		{"accepts 2 arg(s)", []string{"orders"}},
		{"Invalid schema", []string{"orders", "-"}},
	} {
		r := runSemaq(t, url, "{", append([]string{"schema", "check"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("check %v: exit %d, stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

func TestSchemaCLIConfig(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, _, bad := schemaFiles(t)
	mustSemaq(t, url, "", "schema", "register", "orders", v1)

	if out := mustSemaq(t, url, "", "schema", "config"); out != "global: BACKWARD\n" {
		t.Errorf("config = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "config", "orders"); out != "orders: BACKWARD (inherited)\n" {
		t.Errorf("config orders = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "config", "orders", "--compat", "none"); out != "Compatibility of orders set to NONE\n" {
		t.Errorf("config orders --compat none = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "config", "orders"); out != "orders: NONE\n" {
		t.Errorf("config orders after set = %q", out)
	}
	mustSemaq(t, url, "", "schema", "register", "orders", bad)
	if out := mustSemaq(t, url, "", "schema", "config", "--compat", "Full_Transitive"); out != "Global compatibility set to FULL_TRANSITIVE\n" {
		t.Errorf("config --compat Full_Transitive = %q", out)
	}
	var cfg semaq.SchemaConfig
	out := mustSemaq(t, url, "", "schema", "config", "other", "--json")
	if err := json.Unmarshal([]byte(out), &cfg); err != nil || cfg.Compatibility != "FULL_TRANSITIVE" || !cfg.Inherited || cfg.Subject != "other" {
		t.Errorf("config other --json = %q (%v)", out, err)
	}
}

func TestSchemaCLIRm(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, v2, _ := schemaFiles(t)
	mustSemaq(t, url, "", "schema", "register", "orders", v1)
	mustSemaq(t, url, "", "schema", "register", "orders", v2)

	if out := mustSemaq(t, url, "", "schema", "rm", "orders", "--version", "1"); out != "Soft-deleted orders version 1\n" {
		t.Errorf("rm --version 1 = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "ls", "orders", "--deleted"); out != "1\n2\n" {
		t.Errorf("ls orders --deleted = %q", out)
	}
	mustFailSemaq(t, url, "was not deleted first", "schema", "rm", "orders", "--permanent")
	if out := mustSemaq(t, url, "", "schema", "rm", "orders"); out != "Soft-deleted orders version 2\n" {
		t.Errorf("rm orders = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "ls"); out != "No subjects.\n" {
		t.Errorf("ls after soft delete = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "ls", "--deleted"); out != "orders\n" {
		t.Errorf("ls --deleted after soft delete = %q", out)
	}
	// The ids stay readable after a soft delete.
	mustSemaq(t, url, "", "schema", "get", "--id", "1")
	if out := mustSemaq(t, url, "", "schema", "rm", "orders", "--permanent"); out != "Permanently deleted orders versions 1, 2\n" {
		t.Errorf("rm --permanent = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "ls", "--deleted"); out != "No subjects.\n" {
		t.Errorf("ls --deleted after permanent delete = %q", out)
	}
	mustFailSemaq(t, url, "Schema 1 not found", "schema", "get", "--id", "1")
	mustFailSemaq(t, url, "Subject 'orders' not found", "schema", "rm", "orders")
}

func TestSchemaCLIBindings(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, _, _ := schemaFiles(t)
	mustSemaq(t, url, "", "schema", "register", "orders", v1)

	if out := mustSemaq(t, url, "", "schema", "bindings"); out != "No bindings.\n" {
		t.Errorf("bindings, none = %q", out)
	}
	if out := mustSemaq(t, url, "", "schema", "bind", "ai.orders.>", "orders"); out != "Bound ai.orders.> to schema subject orders\n" {
		t.Errorf("bind = %q", out)
	}
	mustSemaq(t, url, "", "schema", "bind", "ai.orders.eu", "orders")
	out := mustSemaq(t, url, "", "schema", "bindings")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "PATTERN SUBJECT" ||
		strings.Join(strings.Fields(lines[1]), " ") != "ai.orders.> orders" || strings.Join(strings.Fields(lines[2]), " ") != "ai.orders.eu orders" {
		t.Errorf("bindings =\n%s", out)
	}
	var bs []semaq.SchemaBinding
	out = mustSemaq(t, url, "", "schema", "bindings", "--json")
	if err := json.Unmarshal([]byte(out), &bs); err != nil || len(bs) != 2 || bs[0] != (semaq.SchemaBinding{Pattern: "ai.orders.>", Subject: "orders"}) {
		t.Errorf("bindings --json = %q (%v)", out, err)
	}
	if out := mustSemaq(t, url, "", "schema", "unbind", "ai.orders.eu"); out != "Unbound ai.orders.eu\n" {
		t.Errorf("unbind = %q", out)
	}
	mustFailSemaq(t, url, "Binding 'ai.orders.eu' not found", "schema", "unbind", "ai.orders.eu")
	mustFailSemaq(t, url, "Subject 'nope' not found", "schema", "bind", "ai.x", "nope")
	mustFailSemaq(t, url, "Invalid binding", "schema", "bind", "ai..x", "orders")
	if out := mustSemaq(t, url, "", "schema", "bindings", "--json"); !strings.Contains(out, `"ai.orders.>"`) {
		t.Errorf("bindings --json escapes the wildcard: %q", out)
	}
}

// Bad flags are named, and refused before dialling: nothing listens at
// unreachableURL, so a dial would show as a different error.
func TestSchemaCLIBadInput(t *testing.T) {
	t.Parallel()
	v1, _, _ := schemaFiles(t)
	for _, tc := range []struct {
		want string
		args []string
	}{
		{`--type "xml": use json, avro or protobuf`, []string{"register", "s", v1, "--type", "xml"}},
		{`--ref "common": no NAME=`, []string{"register", "s", v1, "--ref", "common"}},
		{`--ref "c=common": no SUBJECT:VERSION`, []string{"register", "s", v1, "--ref", "c=common"}},
		{`--ref "c=common:x": version "x"`, []string{"register", "s", v1, "--ref", "c=common:x"}},
		{`--ref "c=common:0"`, []string{"register", "s", v1, "--ref", "c=common:0"}},
		{"empty schema", []string{"register", "s", "-"}},
		{"no such file", []string{"register", "s", filepath.Join(t.TempDir(), "missing.json")}},
		{`--compat "sideways": use backward`, []string{"config", "s", "--compat", "sideways"}},
		{`--version "x": use latest or a number`, []string{"get", "s", "--version", "x"}},
		{`--version "0"`, []string{"rm", "s", "--version", "0"}},
		{"give SUBJECT or --id, not both", []string{"get", "s", "--id", "1"}},
		{"give SUBJECT or --id N", []string{"get"}},
		{"--id 0: schema ids start at 1", []string{"get", "--id", "0"}},
		{"--version applies to SUBJECT", []string{"get", "--id", "1", "--version", "2"}},
	} {
		r := mustFailSemaq(t, unreachableURL, tc.want, append([]string{"schema"}, tc.args...)...)
		if r.code != 1 {
			t.Errorf("schema %v: exit %d, want 1", tc.args, r.code)
		}
	}
	// Reference syntax that parses: latest, and subjects holding ':'.
	for in, want := range map[string]semaq.SchemaReference{
		"common.proto=common:latest": {Name: "common.proto", Subject: "common", Version: -1},
		"https://x/y.json=urn:a:b:3": {Name: "https://x/y.json", Subject: "urn:a:b", Version: 3},
	} {
		if got, err := parseSchemaRef(in); err != nil || got != want {
			t.Errorf("parseSchemaRef(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for file, want := range map[string]string{"a.avsc": "AVRO", "a.proto": "PROTOBUF", "a.json": "JSON", "-": "JSON", "a.AVSC": "AVRO"} {
		if got, err := schemaType("", file); err != nil || got != want {
			t.Errorf("schemaType(%q) = %q, %v; want %s", file, got, err, want)
		}
	}
}

// A registration with a reference, end to end through --ref.
func TestSchemaCLIReferences(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	mustSemaq(t, url, `{"type":"object","properties":{"amount":{"type":"number"}}}`, "schema", "register", "money", "-")
	out := mustSemaq(t, url, `{"type":"object","properties":{"total":{"$ref":"https://example.com/money.json"}}}`,
		"schema", "register", "invoices", "-", "--ref", "https://example.com/money.json=money:latest")
	if out != "Registered invoices version 1: schema id 2\n" {
		t.Errorf("register with --ref = %q", out)
	}
	r := runSemaq(t, url, "", "schema", "get", "invoices")
	if r.code != 0 || !strings.Contains(r.stderr, "reference https://example.com/money.json: money version 1") {
		t.Errorf("get invoices: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runSemaq(t, url, `{"$ref":"https://example.com/m.json"}`, "schema", "register", "x", "-", "--ref", "https://example.com/m.json=nope:1")
	if r.code != 1 || !strings.Contains(r.stderr, `subject "nope" version 1 not found`) {
		t.Errorf("register with a dangling --ref: exit %d, stderr %q", r.code, r.stderr)
	}
}

// An unknown subject fails the check (exit 2), so a misspelt subject in a
// CI gate does not pass; --allow-new accepts a subject without versions.
func TestSchemaCLICheckUnknownSubject(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	v1, v2, _ := schemaFiles(t)
	r := runSemaq(t, url, "", "schema", "check", "nope", v2)
	if r.code != 2 || r.stdout != "" || r.stderr != "semaq: registry subject \"nope\" not found (semaq schema ls lists them; --allow-new checks against a new subject)\n" {
		t.Errorf("check against an unknown subject: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}
	if out := mustSemaq(t, url, "", "schema", "check", "nope", v2, "--allow-new"); out != "compatible\n" {
		t.Errorf("check --allow-new = %q", out)
	}
	// A subject whose versions are all soft-deleted has none to check against.
	mustSemaq(t, url, "", "schema", "register", "gone", v1)
	mustSemaq(t, url, "", "schema", "rm", "gone")
	if r := runSemaq(t, url, "", "schema", "check", "gone", v2); r.code != 2 || !strings.Contains(r.stderr, `registry subject "gone" not found`) {
		t.Errorf("check against a deleted subject: exit %d, stderr %q", r.code, r.stderr)
	}
}

// An inferred schema evolves under the default BACKWARD mode when it is
// closed: an optional property may be added. The open default refuses it
// with Confluent's rule, and the CLI says why and what to do.
func TestSchemaCLIEvolveInferred(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	samples := "{\"model\":\"llama3\",\"max_tokens\":64,\"meta\":{\"user\":\"a\"}}\n{\"model\":\"gemma2\",\"max_tokens\":8,\"meta\":{\"user\":\"b\"}}\n"
	dir := t.TempDir()
	for _, tc := range []struct {
		subject string
		flags   []string
	}{
		{"open", nil},
		{"closed", []string{"--closed"}},
	} {
		var out, errb strings.Builder
		if code := Main(append([]string{"schema", "infer"}, tc.flags...), strings.NewReader(samples), &out, &errb); code != 0 {
			t.Fatalf("schema infer %v: exit %d, %s", tc.flags, code, errb.String())
		}
		v1 := out.String()
		mustSemaq(t, url, v1, "schema", "register", tc.subject, "-")
		// v2: an optional string property, top level and nested.
		var s map[string]any
		if err := json.Unmarshal([]byte(v1), &s); err != nil {
			t.Fatal(err)
		}
		s["properties"].(map[string]any)["temperature"] = map[string]any{"type": "number"}
		s["properties"].(map[string]any)["meta"].(map[string]any)["properties"].(map[string]any)["team"] = map[string]any{"type": "string"}
		b, _ := json.Marshal(s)
		v2 := filepath.Join(dir, tc.subject+"-v2.json")
		if err := os.WriteFile(v2, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := runSemaq(t, url, "", "schema", "check", tc.subject, v2)
		switch tc.subject {
		case "closed":
			if r.code != 0 || r.stdout != "compatible\n" {
				t.Errorf("closed inferred schema + optional properties: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
			}
			mustSemaq(t, url, "", "schema", "register", tc.subject, v2)
		case "open":
			if r.code != 1 || strings.Count(r.stdout, "OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL") != 2 ||
				strings.Count(r.stderr, "hint: OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL:") != 1 || !strings.Contains(r.stderr, "schema infer --closed") || !strings.Contains(r.stderr, "schema config open --compat none") ||
				!strings.HasPrefix(lastLine(r.stderr), "semaq: incompatible with subject open") {
				t.Errorf("open inferred schema + optional properties: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
			}
			r := runSemaq(t, url, "", "schema", "register", tc.subject, v2)
			if r.code != 1 || !strings.Contains(r.stderr, "hint: OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL:") || !strings.HasPrefix(lastLine(r.stderr), "semaq: Schema being registered is incompatible") {
				t.Errorf("register the open v2: exit %d, stderr %q", r.code, r.stderr)
			}
			// The hint's other way out: a property that accepts anything.
			var s map[string]any
			_ = json.Unmarshal([]byte(v1), &s)
			s["properties"].(map[string]any)["temperature"] = map[string]any{}
			b, _ := json.Marshal(s)
			if out := mustSemaq(t, url, string(b), "schema", "check", tc.subject, "-"); out != "compatible\n" {
				t.Errorf("open schema + a {} property: %q", out)
			}
		}
	}
}

// A misspelt JSON Schema keyword enforces nothing: register says so, with
// the keyword meant; --strict refuses the schema.
func TestSchemaCLIRegisterWarnsOfUnknownKeywords(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	const typo = `{"type":"object","requird":["model"],"properties":{"model":{"type":"string"}}}`
	r := runSemaq(t, url, typo, "schema", "register", "req", "-", "--strict")
	if r.code == 0 || !strings.Contains(r.stderr, `--strict: /: unknown keyword "requird" (did you mean "required"?)`) {
		t.Fatalf("register --strict with a typo: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runSemaq(t, url, typo, "schema", "register", "req", "-")
	if r.code != 0 || !strings.Contains(r.stderr, `semaq: warning: /: unknown keyword "requird" (did you mean "required"?); validation ignores it`) {
		t.Fatalf("register with a typo: exit %d, stderr %q", r.code, r.stderr)
	}
}
