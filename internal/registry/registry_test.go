package registry

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{Bucket: "SQ-schemas_2", Replicas: 3}, true},
		{Config{Bucket: "bad.name"}, false},
		{Config{Bucket: "bad name"}, false},
		{Config{Replicas: -1}, false},
		{Config{Replicas: 6}, false},
	} {
		if err := c.cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate() = %v", c.cfg, err)
		}
	}
}

func TestErrorIsAndStatus(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("wrapped: %w", subjectNotFound("x"))
	if !errors.Is(err, ErrSubjectNotFound) || errors.Is(err, ErrVersionNotFound) {
		t.Fatalf("errors.Is by code broken: %v", err)
	}
	for code, status := range map[int]int{40401: 404, 409: 409, 42201: 422, 50002: 500, 422: 422} {
		if got := (&Error{Code: code}).Status(); got != status {
			t.Errorf("Status(%d) = %d, want %d", code, got, status)
		}
	}
}

func TestSameSchemaSameID(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	a := register(t, r, "orders-value", `{"type": "object"}`)
	if a != 1 {
		t.Fatalf("first id %d, want 1", a)
	}
	// Another subject, other whitespace: the same canonical schema.
	if b := register(t, r, "payments-value", `{ "type":"object" }`); b != a {
		t.Fatalf("same schema under another subject: id %d, want %d", b, a)
	}
	// Identical re-register: same id, no new version.
	if c := register(t, r, "orders-value", `{"type":"object"}`); c != a {
		t.Fatalf("re-register: id %d, want %d", c, a)
	}
	if vs := must[[]int](t)(r.Versions(ctx, "orders-value", false)); !slices.Equal(vs, []int{1}) {
		t.Fatalf("versions %v, want [1]", vs)
	}
	// A different schema gets the next id and version.
	if d := register(t, r, "orders-value", `{"type":"object","title":"o"}`); d != 2 {
		t.Fatalf("new schema id %d, want 2", d)
	}
	if vs := must[[]int](t)(r.Versions(ctx, "orders-value", false)); !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("versions %v, want [1 2]", vs)
	}
	svs := must[[]SubjectVersion](t)(r.SubjectVersionsByID(ctx, a))
	want := []SubjectVersion{{"orders-value", 1}, {"payments-value", 1}}
	if !slices.Equal(svs, want) {
		t.Fatalf("SubjectVersionsByID = %v, want %v", svs, want)
	}
	// The type is part of identity: the same text as AVRO is another schema.
	id, err := r.Register(ctx, "avro-value", SchemaRequest{Schema: `{"type":"object"}`}, false)
	if err != nil || id == a {
		t.Fatalf("same text, other type: id %d err %v; want a new id", id, err)
	}
	e := must[*Entry](t)(r.SchemaByID(ctx, id))
	if e.SchemaType != "AVRO" || e.Compiled == nil {
		t.Fatalf("entry %+v: want type AVRO and compiled", e)
	}
}

func TestRegisterNormalizeStoresCanonical(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	id, err := r.Register(ctx, "n", SchemaRequest{Schema: `{ "a" : 1 }`, SchemaType: "json"}, true)
	if err != nil {
		t.Fatal(err)
	}
	e := must[*Entry](t)(r.SchemaByID(ctx, id))
	if e.Schema != `{"a":1}` || e.SchemaType != "JSON" {
		t.Fatalf("entry %+v, want canonical text and upper-case type", e)
	}
}

func TestRegisterRejects(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	for _, c := range []struct {
		name    string
		subject string
		req     SchemaRequest
		code    int
	}{
		{"not json", "s", SchemaRequest{Schema: "{", SchemaType: "JSON"}, CodeInvalidSchema},
		{"empty", "s", SchemaRequest{Schema: " ", SchemaType: "JSON"}, CodeInvalidSchema},
		{"unknown type", "s", SchemaRequest{Schema: "{}", SchemaType: "XML"}, CodeInvalidSchema},
		{"missing reference", "s", SchemaRequest{Schema: "{}", SchemaType: "JSON", References: []schema.Reference{{Name: "x", Subject: "nope", Version: 1}}}, CodeInvalidSchema},
		{"reference without name", "s", SchemaRequest{Schema: "{}", SchemaType: "JSON", References: []schema.Reference{{Subject: "nope", Version: 1}}}, CodeInvalidSchema},
		{"reference version 0", "s", SchemaRequest{Schema: "{}", SchemaType: "JSON", References: []schema.Reference{{Name: "x", Subject: "nope"}}}, CodeInvalidSchema},
		{"empty subject", "", SchemaRequest{Schema: "{}", SchemaType: "JSON"}, CodeInvalidSubject},
		{"control character", "a\x01b", SchemaRequest{Schema: "{}", SchemaType: "JSON"}, CodeInvalidSubject},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := r.Register(ctx, c.subject, c.req, false)
			wantCode(t, err, c.code)
		})
	}
	if s := r.Subjects(ctx, "", true); len(s) != 0 {
		t.Fatalf("rejected registrations left subjects %v", s)
	}
}

func TestCompatibilityModes(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	v1 := `{"required":["a"]}`
	v2 := `{"required":["a","b"]}`
	register(t, r, "c", v1)

	// Default BACKWARD: the new schema requires a field old data lacks.
	if m := must[schema.Mode](t)(r.Compatibility(ctx, "c")); m != schema.Backward {
		t.Fatalf("default mode %s", m)
	}
	_, err := r.Register(ctx, "c", SchemaRequest{Schema: v2, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeIncompatible)
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "REQUIRED_ATTRIBUTE_ADDED") || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("409 without its reasons: %v", err)
	}
	ok, reasons, err := r.Check(ctx, "c", "latest", SchemaRequest{Schema: v2, SchemaType: "JSON"})
	if err != nil || ok || len(reasons) != 1 || reasons[0].Rule != "REQUIRED_ATTRIBUTE_ADDED" {
		t.Fatalf("Check = %v %v %v", ok, reasons, err)
	}
	// Dropping a requirement is backward compatible.
	if id := register(t, r, "c", `{"required":[]}`); id == 0 {
		t.Fatal("no id")
	}

	// Global FORWARD, subject NONE: the subject's setting wins.
	noErr(t, r.SetCompatibility(ctx, "", schema.Forward))
	noErr(t, r.SetCompatibility(ctx, "c", schema.None))
	if m := must[schema.Mode](t)(r.Compatibility(ctx, "c")); m != schema.None {
		t.Fatalf("subject mode %s, want NONE", m)
	}
	register(t, r, "c", `{"required":["a","b","c"]}`)
	if m := must[schema.Mode](t)(r.Compatibility(ctx, "other")); m != schema.Forward {
		t.Fatalf("global mode %s, want FORWARD", m)
	}

	// Deleting the subject's setting falls back to the global one.
	noErr(t, r.DeleteCompatibility(ctx, "c"))
	if m := must[schema.Mode](t)(r.Compatibility(ctx, "c")); m != schema.Forward {
		t.Fatalf("after delete: mode %s, want FORWARD", m)
	}
	_, err = r.SubjectCompatibility(ctx, "c")
	wantCode(t, err, CodeSubjectCompatNotConfigured)
	wantCode(t, r.DeleteCompatibility(ctx, "c"), CodeSubjectNotFound)
	noErr(t, r.DeleteCompatibility(ctx, ""))
	if m := must[schema.Mode](t)(r.Compatibility(ctx, "c")); m != schema.Backward {
		t.Fatalf("after global delete: mode %s, want BACKWARD", m)
	}
	wantCode(t, r.SetCompatibility(ctx, "c", "SIDEWAYS"), CodeInvalidCompatibility)
}

func TestTransitiveCompatibility(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	noErr(t, r.SetCompatibility(ctx, "t", schema.BackwardTransitive))
	register(t, r, "t", `{"required":[]}`)
	noErr(t, r.SetCompatibility(ctx, "t", schema.None))
	register(t, r, "t", `{"required":["a"]}`)
	noErr(t, r.SetCompatibility(ctx, "t", schema.BackwardTransitive))
	// Compatible with v2 (requires a) but not with v1 (requires nothing).
	_, err := r.Register(ctx, "t", SchemaRequest{Schema: `{"required":["a"],"x":1}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeIncompatible)
	if !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("reason does not name version 1: %v", err)
	}
	// Non-transitive against the latest only: accepted.
	noErr(t, r.SetCompatibility(ctx, "t", schema.Backward))
	register(t, r, "t", `{"required":["a"],"x":1}`)

	// A schema of another type is never compatible.
	_, err = r.Register(ctx, "t", SchemaRequest{Schema: `{"required":["a"]}`, SchemaType: "AVRO"}, false)
	wantCode(t, err, CodeIncompatible)
}

func TestSoftAndPermanentDelete(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	id1 := register(t, r, "d", `{"v":1}`)
	id2 := register(t, r, "d", `{"v":2}`)
	id3 := register(t, r, "d", `{"v":3}`)

	// Permanent first needs soft.
	_, err := r.DeleteVersion(ctx, "d", "2", true)
	wantCode(t, err, CodeVersionNotSoftDeleted)
	if v := must[int](t)(r.DeleteVersion(ctx, "d", "2", false)); v != 2 {
		t.Fatalf("deleted version %d", v)
	}
	_, err = r.DeleteVersion(ctx, "d", "2", false)
	wantCode(t, err, CodeVersionSoftDeleted)
	if vs := must[[]int](t)(r.Versions(ctx, "d", false)); !slices.Equal(vs, []int{1, 3}) {
		t.Fatalf("live versions %v", vs)
	}
	if vs := must[[]int](t)(r.Versions(ctx, "d", true)); !slices.Equal(vs, []int{1, 2, 3}) {
		t.Fatalf("all versions %v", vs)
	}
	_, err = r.Version(ctx, "d", "2", false)
	wantCode(t, err, CodeVersionNotFound)
	if v := must[*Version](t)(r.Version(ctx, "d", "2", true)); v.ID != id2 || !v.Deleted {
		t.Fatalf("deleted version %+v", v)
	}
	// The id stays resolvable, but no longer names a live version.
	if _, ok := r.Cached(id2); !ok {
		t.Fatal("soft-deleted schema not resolvable by id")
	}
	if r.SubjectHasID("d", id2) || !r.SubjectHasID("d", id3) {
		t.Fatal("SubjectHasID ignores soft deletes")
	}
	if v := must[int](t)(r.DeleteVersion(ctx, "d", "2", true)); v != 2 {
		t.Fatalf("permanently deleted %d", v)
	}
	_, err = r.SchemaByID(ctx, id2)
	wantCode(t, err, CodeSchemaNotFound)
	_, err = r.Version(ctx, "d", "2", true)
	wantCode(t, err, CodeVersionNotFound)
	// The same schema registered elsewhere brings its id back.
	if id := register(t, r, "e", `{"v":2}`); id != id2 {
		t.Fatalf("re-registered after permanent delete: id %d, want %d", id, id2)
	}

	// "latest" soft-deletes the newest live version.
	if v := must[int](t)(r.DeleteVersion(ctx, "d", "latest", false)); v != 3 {
		t.Fatalf("latest deleted %d, want 3", v)
	}
	if e, v, ok := r.Latest("d"); !ok || v != 1 || e.ID != id1 {
		t.Fatalf("Latest = %v %d %v", e, v, ok)
	}

	// Subject: permanent first needs soft.
	_, err = r.DeleteSubject(ctx, "d", true)
	wantCode(t, err, CodeSubjectNotSoftDeleted)
	if vs := must[[]int](t)(r.DeleteSubject(ctx, "d", false)); !slices.Equal(vs, []int{1}) {
		t.Fatalf("soft-deleted versions %v", vs)
	}
	_, err = r.DeleteSubject(ctx, "d", false)
	wantCode(t, err, CodeSubjectSoftDeleted)
	if s := r.Subjects(ctx, "d", false); len(s) != 0 {
		t.Fatalf("subjects %v after soft delete", s)
	}
	if s := r.Subjects(ctx, "d", true); !slices.Equal(s, []string{"d"}) {
		t.Fatalf("deleted subjects %v", s)
	}
	_, err = r.Versions(ctx, "d", false)
	wantCode(t, err, CodeSubjectNotFound)
	if _, _, ok := r.Latest("d"); ok {
		t.Fatal("Latest of a soft-deleted subject")
	}

	// Re-registering continues the version numbers.
	register(t, r, "d", `{"v":4}`)
	if vs := must[[]int](t)(r.Versions(ctx, "d", true)); !slices.Equal(vs, []int{1, 3, 4}) {
		t.Fatalf("versions after re-register %v", vs)
	}
	must[[]int](t)(r.DeleteSubject(ctx, "d", false))
	if vs := must[[]int](t)(r.DeleteSubject(ctx, "d", true)); !slices.Equal(vs, []int{1, 3, 4}) {
		t.Fatalf("permanently deleted %v", vs)
	}
	if s := r.Subjects(ctx, "", true); !slices.Equal(s, []string{"e"}) {
		t.Fatalf("subjects %v after permanent delete", s)
	}
	_, err = r.DeleteSubject(ctx, "d", false)
	wantCode(t, err, CodeSubjectNotFound)
	// After a permanent delete the subject starts again at version 1.
	register(t, r, "d", `{"v":5}`)
	if vs := must[[]int](t)(r.Versions(ctx, "d", true)); !slices.Equal(vs, []int{1}) {
		t.Fatalf("versions after permanent delete and register %v", vs)
	}
}

func TestSoftDeleteSubjectDropsItsCompatibility(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	register(t, r, "s", `{}`)
	noErr(t, r.SetCompatibility(ctx, "s", schema.Full))
	must[[]int](t)(r.DeleteSubject(ctx, "s", false))
	_, err := r.SubjectCompatibility(ctx, "s")
	wantCode(t, err, CodeSubjectCompatNotConfigured)
}

func TestVersionArgument(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	register(t, r, "v", `{"v":1}`)
	register(t, r, "v", `{"v":2}`)
	for _, c := range []struct {
		version string
		want    int
		code    int
	}{
		{"latest", 2, 0}, {"LATEST", 2, 0}, {"-1", 2, 0}, {"1", 1, 0},
		{"3", 0, CodeVersionNotFound}, {"0", 0, CodeInvalidVersion}, {"-2", 0, CodeInvalidVersion},
		{"x", 0, CodeInvalidVersion}, {"2147483648", 0, CodeInvalidVersion},
	} {
		v, err := r.Version(ctx, "v", c.version, false)
		if c.code != 0 {
			wantCode(t, err, c.code)
			continue
		}
		if err != nil || v.Version != c.want {
			t.Errorf("Version(%q) = %+v %v, want %d", c.version, v, err, c.want)
		}
	}
	_, err := r.Version(ctx, "nope", "1", false)
	wantCode(t, err, CodeSubjectNotFound)
}

func TestLookup(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	id := register(t, r, "l", `{"a":1}`)
	register(t, r, "l", `{"a":2}`)
	v, err := r.Lookup(ctx, "l", SchemaRequest{Schema: `{ "a": 1 }`, SchemaType: "JSON"}, false)
	if err != nil || v.ID != id || v.Version != 1 || v.Subject != "l" || v.Schema != `{"a":1}` {
		t.Fatalf("Lookup = %+v %v", v, err)
	}
	_, err = r.Lookup(ctx, "l", SchemaRequest{Schema: `{"a":3}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeSchemaNotFound)
	_, err = r.Lookup(ctx, "nope", SchemaRequest{Schema: `{"a":1}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeSubjectNotFound)
	_, err = r.Lookup(ctx, "l", SchemaRequest{Schema: `{`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeInvalidSchema)
	must[int](t)(r.DeleteVersion(ctx, "l", "1", false))
	_, err = r.Lookup(ctx, "l", SchemaRequest{Schema: `{"a":1}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeSchemaNotFound)
	if v := must[*Version](t)(r.Lookup(ctx, "l", SchemaRequest{Schema: `{"a":1}`, SchemaType: "JSON"}, true)); v.Version != 1 {
		t.Fatalf("Lookup deleted = %+v", v)
	}
	// A soft-deleted schema registered again is a new version with its id.
	if again := register(t, r, "l", `{"a":1}`); again != id {
		t.Fatalf("re-registered soft-deleted schema: id %d, want %d", again, id)
	}
	if vs := must[[]int](t)(r.Versions(ctx, "l", false)); !slices.Equal(vs, []int{2, 3}) {
		t.Fatalf("versions %v", vs)
	}
}

func TestReferences(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	base := register(t, r, "address", `{"title":"address"}`)
	ref := schema.Reference{Name: "address.json", Subject: "address", Version: 1}
	id := register(t, r, "customer", `{"title":"customer"}`, ref)
	if id == base {
		t.Fatal("referencing schema got the referenced id")
	}
	e := must[*Entry](t)(r.SchemaByID(ctx, id))
	if len(e.References) != 1 || e.References[0] != ref {
		t.Fatalf("references %v", e.References)
	}
	// References are part of identity: same text, no reference, other id.
	if other := register(t, r, "customer2", `{"title":"customer"}`); other == id {
		t.Fatal("references ignored in schema identity")
	}
	// -1 means the latest version, stored as its number.
	latest := register(t, r, "customer3", `{"title":"c3"}`, schema.Reference{Name: "a", Subject: "address", Version: -1})
	if e := must[*Entry](t)(r.SchemaByID(ctx, latest)); e.References[0].Version != 1 {
		t.Fatalf("latest reference stored as %v", e.References)
	}
	if by := must[[]int](t)(r.ReferencedBy(ctx, "address", "1")); !slices.Equal(by, []int{id, latest}) {
		t.Fatalf("referenced by %v, want [%d %d]", by, id, latest)
	}
	_, err := r.Register(ctx, "customer", SchemaRequest{Schema: `{}`, SchemaType: "JSON",
		References: []schema.Reference{{Name: "x", Subject: "address", Version: 9}}}, false)
	wantCode(t, err, CodeInvalidSchema)

	// A referenced version cannot be deleted while a live schema uses it.
	_, err = r.DeleteVersion(ctx, "address", "1", false)
	wantCode(t, err, CodeReferenceExists)
	_, err = r.DeleteSubject(ctx, "address", false)
	wantCode(t, err, CodeReferenceExists)
	must[[]int](t)(r.DeleteSubject(ctx, "customer", false))
	must[[]int](t)(r.DeleteSubject(ctx, "customer3", false))
	if by := must[[]int](t)(r.ReferencedBy(ctx, "address", "1")); len(by) != 0 {
		t.Fatalf("referenced by %v after the referrers were deleted", by)
	}
	must[[]int](t)(r.DeleteSubject(ctx, "address", false))
	// The soft-deleted referrer still resolves (its reference too).
	if _, ok := r.Cached(id); !ok {
		t.Fatal("soft-deleted referrer not resolvable")
	}
}

func TestBindings(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	register(t, r, "llm", `{}`)
	register(t, r, "any", `{"x":1}`)
	wantCode(t, r.Bind(ctx, "ai.x", "missing"), CodeSubjectNotFound)
	for _, p := range []string{"", "a..b", "a.>.b", "a.b*", "a b", ">x"} {
		if err := r.Bind(ctx, p, "llm"); !errors.Is(err, ErrInvalidBinding) {
			t.Errorf("Bind(%q) = %v, want ErrInvalidBinding", p, err)
		}
	}
	binds := map[string]string{
		"ai.>":                  "any",
		"ai.*.llm":              "llm",
		"ai.inference.*":        "any",
		"ai.inference.llm":      "llm",
		"ai.*.*":                "any",
		">":                     "any",
		"ai.inference.llm.>":    "llm",
		"ai.inference.*.stream": "any",
	}
	for p, s := range binds {
		if err := r.Bind(ctx, p, s); err != nil {
			t.Fatalf("Bind(%q): %v", p, err)
		}
	}
	for _, c := range []struct{ subject, want string }{
		{"ai.inference.llm", "ai.inference.llm"},
		{"ai.inference.rag", "ai.inference.*"},
		{"ai.training.llm", "ai.*.llm"},
		{"ai.training.rag", "ai.*.*"},
		{"ai.a.b.c", "ai.>"},
		{"ai.inference.llm.x", "ai.inference.llm.>"},
		{"ai.inference.x.stream", "ai.inference.*.stream"},
		{"other", ">"},
		{"ai", ">"},
	} {
		b, ok := r.BindingFor(c.subject)
		if !ok || b.Pattern != c.want || b.Subject != binds[c.want] {
			t.Errorf("BindingFor(%q) = %+v %v, want %q", c.subject, b, ok, c.want)
		}
	}
	if got := len(r.Bindings()); got != len(binds) {
		t.Fatalf("%d bindings, want %d", got, len(binds))
	}
	if !slices.IsSortedFunc(r.Bindings(), func(a, b Binding) int { return strings.Compare(a.Pattern, b.Pattern) }) {
		t.Fatal("Bindings not sorted")
	}
	// Rebinding replaces the subject.
	noErr(t, r.Bind(ctx, "ai.inference.llm", "any"))
	if b, _ := r.BindingFor("ai.inference.llm"); b.Subject != "any" {
		t.Fatalf("rebind: %+v", b)
	}
	noErr(t, r.Unbind(ctx, ">"))
	if b, ok := r.BindingFor("other"); ok {
		t.Fatalf("unbound pattern still matches: %+v", b)
	}
	wantCode(t, r.Unbind(ctx, ">"), CodeBindingNotFound)
}

func TestMatchPattern(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a", "a", true}, {"a", "b", false}, {"a", "a.b", false}, {"a.b", "a", false},
		{"*", "a", true}, {"*", "a.b", false}, {"a.*", "a.b", true}, {"a.*", "a", false},
		{">", "a", true}, {">", "a.b.c", true}, {"a.>", "a", false}, {"a.>", "a.b", true},
		{"a.*.c", "a.b.c", true}, {"a.*.c", "a.b.d", false}, {"a", "", false}, {">", "", false},
	} {
		if got := matchPattern(c.pattern, c.subject); got != c.want {
			t.Errorf("matchPattern(%q, %q) = %v", c.pattern, c.subject, got)
		}
	}
}

func TestRestartKeepsRegistry(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	r, err := Open(ctxT(t), n.js, Config{Formats: fakeFormats()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	id1 := register(t, r, "a", `{"a":1}`)
	id2 := register(t, r, "a", `{"a":2}`)
	id3 := register(t, r, "b.with spaces/and:colons", `{"b":1}`)
	// Loading compiles a schema with references after everything it
	// references is in.
	refID := register(t, r, "z-referrer", `{"z":1}`, schema.Reference{Name: "b", Subject: "b.with spaces/and:colons", Version: 1})
	must[int](t)(r.DeleteVersion(ctx, "a", "1", false))
	noErr(t, r.SetCompatibility(ctx, "", schema.Full))
	noErr(t, r.SetCompatibility(ctx, "a", schema.None))
	noErr(t, r.Bind(ctx, "x.*", "a"))
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	n.stop()

	n2 := startNode(t, n.dir)
	r2 := open(t, n2.js)
	if vs := must[[]int](t)(r2.Versions(ctx, "a", true)); !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("versions %v", vs)
	}
	if vs := must[[]int](t)(r2.Versions(ctx, "a", false)); !slices.Equal(vs, []int{2}) {
		t.Fatalf("live versions %v", vs)
	}
	if v := must[*Version](t)(r2.Version(ctx, "b.with spaces/and:colons", "1", false)); v.ID != id3 {
		t.Fatalf("encoded subject: %+v", v)
	}
	if e, ok := r2.Cached(id1); !ok || e.Schema != `{"a":1}` || e.Compiled == nil {
		t.Fatalf("Cached(%d) = %+v %v", id1, e, ok)
	}
	if e, ok := r2.Cached(refID); !ok || e.Compiled == nil || len(e.References) != 1 {
		t.Fatalf("Cached(%d) = %+v %v", refID, e, ok)
	}
	if e, v, ok := r2.Latest("a"); !ok || v != 2 || e.ID != id2 {
		t.Fatalf("Latest = %+v %d %v", e, v, ok)
	}
	if m := must[schema.Mode](t)(r2.Compatibility(ctx, "a")); m != schema.None {
		t.Fatalf("subject mode %s", m)
	}
	if m := must[schema.Mode](t)(r2.Compatibility(ctx, "b")); m != schema.Full {
		t.Fatalf("global mode %s", m)
	}
	if b, ok := r2.BindingFor("x.y"); !ok || b.Subject != "a" {
		t.Fatalf("binding lost: %+v %v", b, ok)
	}
	// Ids continue after the restart; known schemas keep theirs.
	if id := register(t, r2, "c", `{"a":1}`); id != id1 {
		t.Fatalf("known schema got id %d, want %d", id, id1)
	}
	if id := register(t, r2, "c", `{"c":1}`); id != refID+1 {
		t.Fatalf("new schema got id %d, want %d", id, refID+1)
	}
}

func TestTwoRegistriesShareABucket(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	r1 := open(t, n.js)
	r2 := open(t, n.conn(t))
	ctx := ctxT(t)

	id := register(t, r1, "shared", `{"s":1}`)
	waitFor(t, r2, "r2 to see r1's schema", func() bool { _, v, ok := r2.Latest("shared"); return ok && v == 1 })
	if e, ok := r2.Cached(id); !ok || e.Compiled == nil {
		t.Fatalf("r2 Cached(%d) = %+v %v", id, e, ok)
	}
	// r2 registers on top of r1's version, and gets the next id.
	id2 := register(t, r2, "shared", `{"s":2}`)
	if id2 != id+1 {
		t.Fatalf("r2 id %d, want %d", id2, id+1)
	}
	// The same schema through the other node: the same id.
	if again := register(t, r1, "elsewhere", `{"s":2}`); again != id2 {
		t.Fatalf("r1 id %d for r2's schema, want %d", again, id2)
	}
	noErr(t, r2.SetCompatibility(ctx, "shared", schema.Full))
	waitFor(t, r1, "r1 to see r2's config", func() bool { m, _ := r1.Compatibility(ctx, "shared"); return m == schema.Full })
	noErr(t, r1.Bind(ctx, "s.>", "shared"))
	waitFor(t, r2, "r2 to see r1's binding", func() bool { _, ok := r2.BindingFor("s.x"); return ok })
	// A write decides on the other node's latest data: r1 soft-deletes,
	// r2 can delete permanently right away.
	must[[]int](t)(r1.DeleteSubject(ctx, "shared", false))
	if vs := must[[]int](t)(r2.DeleteSubject(ctx, "shared", true)); !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("r2 permanent delete %v", vs)
	}
	waitFor(t, r1, "r1 to see the permanent delete", func() bool { return len(r1.Subjects(ctx, "shared", true)) == 0 })
}

func TestConcurrentRegisterNeverDuplicatesIDs(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	regs := []*Registry{open(t, n.js), open(t, n.conn(t))}
	ctx := ctxT(t)
	for _, r := range regs {
		noErr(t, r.SetCompatibility(ctx, "", schema.None))
	}
	const workers, each = 8, 5
	type result struct {
		schema string
		id     int
	}
	results := make(chan result, workers*each*2)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := regs[w%len(regs)]
			for i := range each {
				// Distinct schemas, under one subject and under their own.
				text := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				id, err := r.Register(ctx, "hot", SchemaRequest{Schema: text, SchemaType: "JSON"}, false)
				if err != nil {
					t.Errorf("register: %v", err)
					return
				}
				results <- result{text, id}
				// One schema everyone registers.
				id, err = r.Register(ctx, fmt.Sprintf("s%d", w), SchemaRequest{Schema: `{"common":true}`, SchemaType: "JSON"}, false)
				if err != nil {
					t.Errorf("register: %v", err)
					return
				}
				results <- result{"common", id}
			}
		})
	}
	wg.Wait()
	close(results)
	byID := map[int]string{}
	for res := range results {
		if other, ok := byID[res.id]; ok && other != res.schema {
			t.Fatalf("id %d given to %s and %s", res.id, other, res.schema)
		}
		byID[res.id] = res.schema
	}
	if len(byID) != workers*each+1 {
		t.Fatalf("%d ids, want %d", len(byID), workers*each+1)
	}
	for _, r := range regs {
		waitFor(t, r, "every version", func() bool {
			vs, _ := r.Versions(ctx, "hot", false)
			return len(vs) == workers*each
		})
		vs := must[[]int](t)(r.Versions(ctx, "hot", false))
		for i, v := range vs {
			if v != i+1 {
				t.Fatalf("versions %v: not 1..%d", vs, workers*each)
			}
		}
	}
}

func TestClosedRegistryRefusesWrites(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	id := register(t, r, "a", `{}`)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err := r.Register(ctxT(t), "a", SchemaRequest{Schema: `{"x":1}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeStore)
	if _, ok := r.Cached(id); !ok {
		t.Fatal("reads stop after Close")
	}
}

func TestMalformedEntriesAreSkipped(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	register(t, r, "ok", `{}`)
	for key, val := range map[string]string{
		"ids.x":                          `{}`,
		"ids.99":                         `not json`,
		"subj." + encodeName("s"):        `{}`,
		"subj." + encodeName("s") + ".x": `{}`,
		"subj." + encodeName("s") + ".1": `[`,
		"subj.A.1":                       `{}`,
		"cfg.s.A":                        `{}`,
		"cfg.global":                     `[`,
		"bind.A":                         `{}`,
		"unknown.key":                    `{}`,
	} {
		if _, err := r.kv.Put(ctx, key, []byte(val)); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	// The registry keeps working and ignores them.
	id := register(t, r, "ok", `{"x":1}`)
	if _, ok := r.Cached(id); !ok {
		t.Fatal("registry stopped after malformed entries")
	}
	if s := r.Subjects(ctx, "", true); !slices.Equal(s, []string{"ok"}) {
		t.Fatalf("subjects %v", s)
	}
}

func TestMissingFormat(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	r1 := open(t, n.js)
	id := register(t, r1, "j", `{"j":1}`)
	// A node whose build lacks JSON still serves the schema's text.
	avroOnly := &schema.Formats{}
	avroOnly.Register(fakeFormat{typ: schema.TypeAvro})
	r2, err := Open(ctxT(t), n.conn(t), Config{Formats: avroOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r2.Close() })
	e, ok := r2.Cached(id)
	if !ok || e.Compiled != nil || e.Schema != `{"j":1}` {
		t.Fatalf("Cached(%d) = %+v %v; want the text without a compiled schema", id, e, ok)
	}
	_, err = r2.Register(ctxT(t), "j", SchemaRequest{Schema: `{"j":2}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeInvalidSchema)
	_, err = r2.Register(ctxT(t), "j", SchemaRequest{Schema: `{"j":2}`}, false)
	wantCode(t, err, CodeIncompatible)
}
