package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/logtest"
	"github.com/semaq/semaq/internal/schema"
)

// bounded runs fn and fails if it has not returned within a generous
// bound: a hang detector (the schema compilers cannot be cancelled), not a
// performance assertion.
func bounded[T any](t *testing.T, fn func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- fn() }()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	select {
	case v := <-done:
		return v
	case <-timer.C:
		t.Fatal("did not return within 10 s: a limit was not checked before compiling")
		panic("unreachable")
	}
}

// openReal opens a registry with the built-in formats.
func openReal(t *testing.T, cfg Config) *Registry {
	t.Helper()
	n := startNode(t, "")
	r, err := Open(ctxT(t), n.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func deepJSONSchema(n int) string {
	return strings.Repeat(`{"properties":{"a":`, n) + `{"type":"string"}` + strings.Repeat(`}}`, n)
}

func TestHostileSchemasRefusedBeforeCompiling(t *testing.T) {
	t.Parallel()
	r := openReal(t, Config{})
	var pp strings.Builder
	pp.WriteString(`{"patternProperties":{`)
	for i := range 3000 {
		fmt.Fprintf(&pp, `"^x%d[0-9]{1,900}$":{},`, i)
	}
	pp.WriteString(`"y":{}}}`)
	avro := strings.Repeat(`{"type":"record","name":"R","fields":[{"name":"f","type":`, 3000) + `"int"` + strings.Repeat(`}]}`, 3000)
	proto := "syntax = \"proto3\";\n" + strings.Repeat("message M {\n", 3000) + strings.Repeat("}\n", 3000)
	cases := []struct {
		name, typ, text, want string
	}{
		{"json 3000 deep", "JSON", deepJSONSchema(3000), "MaxDepth"},
		{"json 3000 patternProperties", "JSON", pp.String(), "MaxPatternProgram"},
		{"avro 3000 deep", "AVRO", avro, "MaxDepth"},
		{"protobuf 3000 deep", "PROTOBUF", proto, "MaxDepth"},
		{"json over 1 MiB", "JSON", `{"description":"` + strings.Repeat("x", 1<<20) + `"}`, "MaxSchemaBytes"},
		{"json duplicate keys", "JSON", `{"type":"string","type":"object"}`, `duplicate key "type" at /`},
		{"avro duplicate keys", "AVRO", `{"type":"record","name":"R","fields":[],"name":"S"}`, `duplicate key "name" at /`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := bounded(t, func() error {
				_, err := r.Register(ctxT(t), "hostile", SchemaRequest{Schema: tc.text, SchemaType: tc.typ}, false)
				return err
			})
			wantCode(t, err, CodeInvalidSchema)
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not name %s", err, tc.want)
			}
		})
	}
	// The registry still takes writes.
	if _, err := r.Register(ctxT(t), "ok", SchemaRequest{Schema: deepJSONSchema(20), SchemaType: "JSON"}, false); err != nil {
		t.Fatal(err)
	}
}

// A stored schema over the limits (stored by a build with other limits,
// or before limits existed) must not hang loading: it is refused, logged
// by id and subject, and left without Compiled, with Err saying why, so
// schema-on-write refuses payloads for it.
func TestStoredSchemaOverLimitsAtLoad(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	lax, err := Open(ctxT(t), n.js, Config{Limits: schema.Limits{MaxDepth: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lax.Close() })
	ctx := ctxT(t)
	// Variant 1: registered under laxer limits (40 schema levels).
	id40, err := lax.Register(ctx, "deep-40", SchemaRequest{Schema: deepJSONSchema(40), SchemaType: "JSON"}, false)
	if err != nil {
		t.Fatal(err)
	}
	// Variant 2: written straight into the bucket, as an older build
	// without limits would have: 3,000 levels, minutes to compile.
	text := deepJSONSchema(3000)
	const id3000 = 1000
	for key, val := range map[string]any{
		keySchema(id3000):          schemaRecord{ID: id3000, SchemaType: "JSON", Schema: text, Hash: "h3000"},
		keyCanon("h3000"):          canonRecord{ID: id3000},
		keyVersion("deep-3000", 1): versionRecord{Subject: "deep-3000", Version: 1, ID: id3000},
	} {
		if _, err := lax.kv.Put(ctx, key, marshal(val)); err != nil {
			t.Fatal(err)
		}
	}

	var logs logtest.Buffer
	strict := bounded(t, func() *Registry {
		r, err := Open(ctxT(t), n.conn(t), Config{Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Error(err)
			return nil
		}
		return r
	})
	if strict == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = strict.Close() })
	for _, tc := range []struct {
		id      int
		subject string
	}{{id40, "deep-40"}, {id3000, "deep-3000"}} {
		e, _, ok := strict.Latest(tc.subject)
		if !ok || e.ID != tc.id {
			t.Fatalf("Latest(%s) = %+v %v", tc.subject, e, ok)
		}
		if e.Compiled != nil || !errors.Is(e.Err, schema.ErrLimit) {
			t.Fatalf("entry %d: Compiled %v, Err %v; want no schema and a limit error", tc.id, e.Compiled, e.Err)
		}
		line := fmt.Sprintf("id=%d", tc.id)
		if out := logs.String(); !strings.Contains(out, line) || !strings.Contains(out, tc.subject+" version 1") || !strings.Contains(out, "level=ERROR") {
			t.Fatalf("log does not name schema %d of %s:\n%s", tc.id, tc.subject, out)
		}
	}
	// The registry works: the subject takes a new version within limits
	// (the old one cannot be compared, so with NONE).
	noErr(t, strict.SetCompatibility(ctx, "deep-40", schema.None))
	if _, err := strict.Register(ctx, "deep-40", SchemaRequest{Schema: deepJSONSchema(10), SchemaType: "JSON"}, false); err != nil {
		t.Fatal(err)
	}
}

func TestHostileSubjects(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	for _, subject := range []string{
		"user-\u202Efdp.json", // right-to-left override
		"a\u2066b\u2069",      // isolates
		"a\u200Fb",            // right-to-left mark
		"bad-\xff-utf8",
		"a\x85b",      // C1 NEL, as raw byte
		"a\u0085b",    // C1 NEL
		"line\u2028x", // line separator
		"\uFEFFbom",
		"nul\x00",
		"tab\t",
	} {
		_, err := r.Register(ctxT(t), subject, SchemaRequest{Schema: `{}`, SchemaType: "JSON"}, false)
		wantCode(t, err, CodeInvalidSubject)
		wantCode(t, r.SetCompatibility(ctxT(t), subject, schema.None), CodeInvalidSubject)
		c.wantErr("POST", "/subjects/"+url.PathEscape(subject)+"/versions", body(`{}`), CodeInvalidSubject)
	}
	for _, ok := range []string{"ünïcode-subject", "emoji-\U0001F600", "日本語.value", "a b/c:d"} {
		register(t, r, ok, `{}`)
	}
}

func TestRegistryBounds(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	r, err := Open(ctxT(t), n.js, Config{Formats: fakeFormats(), MaxVersions: 3, MaxSubjects: 3, MaxSchemas: 6, MaxTotalBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	ctx := ctxT(t)
	noErr(t, r.SetCompatibility(ctx, "", schema.None))
	reg := func(subject, text string) (int, error) {
		return r.Register(ctx, subject, SchemaRequest{Schema: text, SchemaType: "JSON"}, false)
	}
	for i := range 3 {
		register(t, r, "v", fmt.Sprintf(`{"v":%d}`, i))
	}
	_, err = reg("v", `{"v":3}`)
	wantCode(t, err, CodeLimitExceeded)
	if !errors.Is(err, ErrLimitExceeded) || !strings.Contains(err.Error(), "MaxVersions") {
		t.Fatalf("error %v", err)
	}
	// An identical schema adds nothing, so it still answers.
	if id, err := reg("v", `{"v":2}`); err != nil || id == 0 {
		t.Fatalf("re-registering an existing version: %d %v", id, err)
	}
	// Soft-deleted versions still count; permanently deleted ones do not.
	must[int](t)(r.DeleteVersion(ctx, "v", "1", false))
	_, err = reg("v", `{"v":3}`)
	wantCode(t, err, CodeLimitExceeded)
	must[int](t)(r.DeleteVersion(ctx, "v", "1", true))
	register(t, r, "v", `{"v":3}`)

	register(t, r, "s2", `{"v":0}`)
	register(t, r, "s3", `{"v":0}`)
	_, err = reg("s4", `{"v":0}`)
	wantCode(t, err, CodeLimitExceeded)
	if !strings.Contains(err.Error(), "MaxSubjects") {
		t.Fatalf("error %v", err)
	}
	register(t, r, "s2", `{"s":2}`)
	register(t, r, "s2", `{"s":3}`)
	_, err = reg("s3", `{"s":4}`)
	wantCode(t, err, CodeLimitExceeded)
	if !strings.Contains(err.Error(), "MaxSchemas") {
		t.Fatalf("error %v", err)
	}
	// Through REST: 422 with the SemaQ code.
	c := newREST(t, r)
	msg := c.wantErr("POST", "/subjects/s3/versions", body(`{"s":4}`), CodeLimitExceeded)
	if !strings.Contains(msg, "MaxSchemas") {
		t.Fatalf("message %q", msg)
	}

	// Total bytes, on a registry of its own.
	r2, err := Open(ctxT(t), n.conn(t), Config{Bucket: "SIZE", Formats: fakeFormats(), MaxTotalBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r2.Close() })
	noErr(t, r2.SetCompatibility(ctx, "", schema.None))
	big := `{"d":"` + strings.Repeat("x", 80) + `"}`
	if _, err := r2.Register(ctx, "a", SchemaRequest{Schema: big, SchemaType: "JSON"}, false); err != nil {
		t.Fatal(err)
	}
	_, err = r2.Register(ctx, "b", SchemaRequest{Schema: `{"e":"` + strings.Repeat("y", 80) + `"}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeLimitExceeded)
	if !strings.Contains(err.Error(), "MaxTotalBytes") {
		t.Fatalf("error %v", err)
	}
	// The same schema under another subject stores nothing new.
	if _, err := r2.Register(ctx, "b", SchemaRequest{Schema: big, SchemaType: "JSON"}, false); err != nil {
		t.Fatal(err)
	}
	if err := (Config{MaxVersions: -1}).Validate(); err == nil {
		t.Fatal("negative bound accepted")
	}
}

func TestRESTStrictRequests(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	for _, tc := range []struct{ name, body, want string }{
		{"duplicate schema", `{"schema":"{}","schema":"{\"required\":[\"a\"]}","schemaType":"JSON"}`, `duplicate key "schema"`},
		{"case variant", `{"schema":"{}","Schema":"{}","schemaType":"JSON"}`, `duplicate key "Schema"`},
		{"lone miscased key", `{"SCHEMA":"{}","schemaType":"JSON"}`, `key "SCHEMA" is spelled "schema"`},
		{"nested miscased key", `{"schema":"{}","schemaType":"JSON","references":[{"Name":"a","subject":"b","version":1}]}`, `key "Name" is spelled "name"`},
		{"nested duplicate", `{"schema":"{}","schemaType":"JSON","references":[{"name":"a","name":"b","subject":"b","version":1}]}`, `duplicate key "name" at /references/0`},
		{"deep body", `{"schema":"{}","x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "MaxDepth"},
		{"huge number", `{"schema":"{}","version":1e999999}`, "MaxNumberExponent"},
		{"empty", ``, "empty"},
		{"trailing data", `{"schema":"{}"} {}`, "after its JSON value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := c.wantErr("POST", "/subjects/strict/versions", tc.body, CodeUnprocessable)
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q, want %q", msg, tc.want)
			}
		})
	}
	msg := c.wantErr("PUT", "/config", `{"compatibility":"NONE","compatibility":"FULL"}`, CodeUnprocessable)
	if !strings.Contains(msg, `duplicate key "compatibility"`) {
		t.Fatalf("message %q", msg)
	}
	// Media types: a Content-Type is required on state-changing requests,
	// and must be JSON (or Confluent's octet-stream).
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"} {
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/subjects/m/versions", body(`{}`)},
			{"PUT", "/config", `{"compatibility":"NONE"}`},
			{"POST", "/compatibility/subjects/m/versions", body(`{}`)},
		} {
			if status, b := c.doType(req.method, req.path, req.body, ct); status != 415 {
				t.Errorf("%s %s with Content-Type %q: %d %s", req.method, req.path, ct, status, b)
			}
		}
	}
	// A body past the size bound (2 * MaxSchemaBytes + 64 KiB).
	huge := body(strings.Repeat(" ", 3<<20))
	msg = c.wantErr("POST", "/subjects/m/versions", huge, CodeUnprocessable)
	if !strings.Contains(msg, "larger than") {
		t.Fatalf("message %q", msg)
	}
	if s := r.Subjects(context.Background(), "", true); len(s) != 0 {
		t.Fatalf("refused requests registered %v", s)
	}
}

// Snapshots share storage with the model; later writes must never show
// through an older snapshot.
func TestSnapshotsAreIsolated(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	ctx := ctxT(t)
	noErr(t, r.SetCompatibility(ctx, "", schema.None))
	id1 := register(t, r, "s", `{"a":1}`)
	register(t, r, "s", `{"a":2}`)
	old := r.state.Load()
	register(t, r, "s", `{"a":3}`)
	must[int](t)(r.DeleteVersion(ctx, "s", "1", false))
	register(t, r, "t", `{"a":1}`)
	s := old.subjects.at("s")
	if len(s.versions) != 2 || s.live != 2 || s.versions[0].deleted || s.versions[1].version != 2 {
		t.Fatalf("old snapshot changed: %+v", s)
	}
	if us := old.uses.at(id1); len(us) != 1 || us[0].subject != "s" {
		t.Fatalf("old snapshot uses changed: %+v", us)
	}
	if old.subjects.at("t") != nil || old.subjects.len() != 1 {
		t.Fatal("old snapshot sees a later subject")
	}
	now := r.state.Load().subjects.at("s")
	if len(now.versions) != 3 || now.live != 2 || !now.versions[0].deleted {
		t.Fatalf("new snapshot: %+v", now)
	}
}

func TestShardedMap(t *testing.T) {
	t.Parallel()
	m := newShardedMap[int, string]()
	for i := range 1000 {
		m.set(i, fmt.Sprint(i))
	}
	frozen := m.freeze()
	for i := range 500 {
		m.del(i)
	}
	m.set(5000, "x")
	m.set(999, "changed")
	if frozen.len() != 1000 || m.len() != 501 {
		t.Fatalf("len frozen %d, live %d", frozen.len(), m.len())
	}
	for i := range 1000 {
		if v, ok := frozen.get(i); !ok || v != fmt.Sprint(i) {
			t.Fatalf("frozen %d = %q %v", i, v, ok)
		}
	}
	if _, ok := frozen.get(5000); ok {
		t.Fatal("frozen sees a later key")
	}
	if m.at(999) != "changed" || m.at(3) != "" {
		t.Fatal("live map wrong")
	}
	n := 0
	for range m.all() {
		n++
	}
	if n != 501 {
		t.Fatalf("all yields %d", n)
	}
}
