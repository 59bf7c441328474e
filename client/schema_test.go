package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Schemas of one subject's history. Under BACKWARD, orderV2 (an optional
// property added to a closed model) may follow orderV1; orderBad (amount's
// type changed) may not.
const (
	orderV1  = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"number"}},"required":["id"],"additionalProperties":false}`
	orderV2  = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"number"},"note":{"type":"string"}},"required":["id"],"additionalProperties":false}`
	orderBad = `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"string"}},"required":["id"],"additionalProperties":false}`
)

func schemaClient(t *testing.T) *client.Client {
	t.Helper()
	return brokertest.Connect(t, brokertest.Start(t))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustRegister(t *testing.T, c *client.Client, subject, text string, opts ...client.SchemaOption) (int, int) {
	t.Helper()
	id, v, err := c.RegisterSchema(testCtx(t), subject, text, opts...)
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return id, v
}

func wantErr(t *testing.T, what string, err error, sentinel *semaq.APIError) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: %v, want %s (%d)", what, err, sentinel.Description, sentinel.ErrCode)
	}
	if ae, ok := errors.AsType[*semaq.APIError](err); !ok || ae.Code != sentinel.Code {
		t.Fatalf("%s: %#v, want an *semaq.APIError with code %d", what, err, sentinel.Code)
	}
}

func TestSchemaRegisterGetRoundTrip(t *testing.T) {
	c := schemaClient(t)
	ctx := testCtx(t)

	id1, v1 := mustRegister(t, c, "orders", orderV1)
	if v1 != 1 || id1 < 1 {
		t.Fatalf("first registration: id %d version %d", id1, v1)
	}
	id2, v2 := mustRegister(t, c, "orders", orderV2)
	if v2 != 2 || id2 == id1 {
		t.Fatalf("second registration: id %d version %d (first id %d)", id2, v2, id1)
	}
	// Registering a live version's schema again returns it.
	if id, v := mustRegister(t, c, "orders", orderV1); id != id1 || v != 1 {
		t.Errorf("re-registering v1: id %d version %d, want %d 1", id, v, id1)
	}
	// The same schema has one id under every subject.
	if id, v := mustRegister(t, c, "orders-archive", orderV1, client.WithSchemaType("json")); id != id1 || v != 1 {
		t.Errorf("v1 under another subject: id %d version %d, want %d 1", id, v, id1)
	}

	s, err := c.SchemaVersion(ctx, "orders", "latest")
	if err != nil {
		t.Fatal(err)
	}
	want := semaq.Schema{ID: id2, Type: "JSON", Text: orderV2, Subject: "orders", Version: 2}
	if !schemaEqual(*s, want) {
		t.Errorf("latest = %+v, want %+v", *s, want)
	}
	if s, err = c.SchemaVersion(ctx, "orders", "1"); err != nil || s.ID != id1 || s.Text != orderV1 || s.Version != 1 {
		t.Errorf("version 1 = %+v, %v", s, err)
	}
	if s, err = c.Schema(ctx, id1); err != nil || s.Text != orderV1 || s.Type != "JSON" || s.Subject != "" {
		t.Errorf("schema %d = %+v, %v", id1, s, err)
	}
	if vs, err := c.SchemaVersions(ctx, "orders", false); err != nil || !slices.Equal(vs, []int{1, 2}) {
		t.Errorf("versions = %v, %v", vs, err)
	}
	if subs, err := c.SchemaSubjects(ctx, false); err != nil || !slices.Equal(subs, []string{"orders", "orders-archive"}) {
		t.Errorf("subjects = %v, %v", subs, err)
	}

	_, err = c.SchemaVersion(ctx, "nope", "latest")
	wantErr(t, "unknown subject", err, semaq.ErrSchemaSubjectNotFound)
	_, err = c.SchemaVersion(ctx, "orders", "7")
	wantErr(t, "unknown version", err, semaq.ErrSchemaVersionNotFound)
	_, err = c.Schema(ctx, 999)
	wantErr(t, "unknown id", err, semaq.ErrSchemaIDNotFound)
	if errors.Is(err, semaq.ErrSchemaNotFound) {
		t.Errorf("registry's 40403 matches the ingress's ErrSchemaNotFound: %v", err)
	}
	_, err = c.SchemaVersions(ctx, "nope", false)
	wantErr(t, "versions of unknown subject", err, semaq.ErrSchemaSubjectNotFound)
}

func schemaEqual(a, b semaq.Schema) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestSchemaTypesAndReferences(t *testing.T) {
	c := schemaClient(t)
	ctx := testCtx(t)
	avro := `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}`
	id, _ := mustRegister(t, c, "orders-avro", avro, client.WithSchemaType("avro"))
	if s, err := c.Schema(ctx, id); err != nil || s.Type != "AVRO" {
		t.Errorf("avro schema = %+v, %v", s, err)
	}
	// A JSON Schema that uses another subject's schema through a reference.
	mustRegister(t, c, "money", `{"type":"object","properties":{"amount":{"type":"number"},"currency":{"type":"string"}}}`)
	ref := semaq.SchemaReference{Name: "https://example.com/money.json", Subject: "money", Version: -1}
	rid, _ := mustRegister(t, c, "invoices",
		`{"type":"object","properties":{"total":{"$ref":"https://example.com/money.json"}}}`,
		client.WithSchemaReferences(ref))
	s, err := c.SchemaVersion(ctx, "invoices", "latest")
	if err != nil {
		t.Fatal(err)
	}
	// -1 (latest) is stored as the version it meant.
	if s.ID != rid || len(s.References) != 1 || s.References[0] != (semaq.SchemaReference{Name: ref.Name, Subject: "money", Version: 1}) {
		t.Errorf("invoices = %+v", s)
	}

	_, _, err = c.RegisterSchema(ctx, "broken", `{"type":`)
	wantErr(t, "unparsable schema", err, semaq.ErrSchemaInvalid)
	_, _, err = c.RegisterSchema(ctx, "invoices2", `{"$ref":"https://example.com/x.json"}`,
		client.WithSchemaReferences(semaq.SchemaReference{Name: "https://example.com/x.json", Subject: "nope", Version: 1}))
	wantErr(t, "reference to a missing subject", err, semaq.ErrSchemaInvalid)
}

func TestSchemaIncompatibleAndCheck(t *testing.T) {
	c := schemaClient(t)
	ctx := testCtx(t)
	mustRegister(t, c, "orders", orderV1)

	_, _, err := c.RegisterSchema(ctx, "orders", orderBad)
	wantErr(t, "incompatible register", err, semaq.ErrSchemaIncompatible)
	if !strings.Contains(err.Error(), "amount") {
		t.Errorf("incompatibility %q does not name the changed property", err)
	}

	ok, reasons, err := c.CheckSchema(ctx, "orders", "", orderBad)
	if err != nil || ok || len(reasons) == 0 {
		t.Fatalf("check bad: %v %v %v", ok, reasons, err)
	}
	if r := reasons[0]; r.Rule == "" || !strings.Contains(r.Path, "amount") {
		t.Errorf("reason %+v: want a rule and a path at amount", r)
	}
	if ok, reasons, err := c.CheckSchema(ctx, "orders", "latest", orderV2); err != nil || !ok || len(reasons) != 0 {
		t.Errorf("check good against latest: %v %v %v", ok, reasons, err)
	}
	if ok, _, err := c.CheckSchema(ctx, "orders", "1", orderBad); err != nil || ok {
		t.Errorf("check bad against version 1: %v %v", ok, err)
	}
	// A subject without versions accepts anything, unless a version is named.
	if ok, _, err := c.CheckSchema(ctx, "fresh", "", orderBad); err != nil || !ok {
		t.Errorf("check against a new subject: %v %v", ok, err)
	}
	_, _, err = c.CheckSchema(ctx, "fresh", "latest", orderBad)
	wantErr(t, "check against a version of a new subject", err, semaq.ErrSchemaSubjectNotFound)
	_, _, err = c.CheckSchema(ctx, "orders", "", `not json`)
	wantErr(t, "check unparsable", err, semaq.ErrSchemaInvalid)
	if vs, _ := c.SchemaVersions(ctx, "orders", false); !slices.Equal(vs, []int{1}) {
		t.Errorf("versions after refused and checked schemas: %v", vs)
	}
}

func TestSchemaCompatibilityConfig(t *testing.T) {
	c := schemaClient(t)
	ctx := testCtx(t)
	mustRegister(t, c, "orders", orderV1)

	if cfg, err := c.SchemaCompatibility(ctx, ""); err != nil || cfg.Compatibility != "BACKWARD" {
		t.Fatalf("global default: %+v %v", cfg, err)
	}
	if cfg, err := c.SchemaCompatibility(ctx, "orders"); err != nil || cfg.Compatibility != "BACKWARD" || !cfg.Inherited {
		t.Fatalf("subject default: %+v %v", cfg, err)
	}
	cfg, err := c.SetSchemaCompatibility(ctx, "orders", "none")
	if err != nil || cfg.Compatibility != "NONE" || cfg.Inherited || cfg.Subject != "orders" {
		t.Fatalf("set orders NONE: %+v %v", cfg, err)
	}
	// NONE lets the breaking change through.
	if _, v := mustRegister(t, c, "orders", orderBad); v != 2 {
		t.Errorf("incompatible schema under NONE: version %d", v)
	}
	if _, err := c.SetSchemaCompatibility(ctx, "", "full_transitive"); err != nil {
		t.Fatal(err)
	}
	if cfg, err := c.SchemaCompatibility(ctx, ""); err != nil || cfg.Compatibility != "FULL_TRANSITIVE" {
		t.Errorf("global after set: %+v %v", cfg, err)
	}
	if cfg, err := c.SchemaCompatibility(ctx, "other"); err != nil || cfg.Compatibility != "FULL_TRANSITIVE" || !cfg.Inherited {
		t.Errorf("another subject inherits the global mode: %+v %v", cfg, err)
	}
	if cfg, err := c.SchemaCompatibility(ctx, "orders"); err != nil || cfg.Compatibility != "NONE" {
		t.Errorf("orders keeps its own mode: %+v %v", cfg, err)
	}

	_, err = c.SetSchemaCompatibility(ctx, "orders", "sideways")
	wantErr(t, "bad mode (client)", err, semaq.ErrSchemaInvalidCompatibility)
	// The broker refuses it too, for clients that do not check.
	var reply struct {
		Error *semaq.APIError `json:"error"`
	}
	m, err := c.Conn().RequestWithContext(ctx, semaq.APISchemaConfigSet, []byte(`{"compatibility":"sideways"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.Error == nil || reply.Error.ErrCode != 42203 || reply.Error.Code != 422 {
		t.Errorf("broker on a bad mode: %s", m.Data)
	}
}

func TestSchemaDelete(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	ctx := testCtx(t)
	id1, _ := mustRegister(t, c, "orders", orderV1)
	mustRegister(t, c, "orders", orderV2)

	if vs, err := c.DeleteSchema(ctx, "orders", "1", false); err != nil || !slices.Equal(vs, []int{1}) {
		t.Fatalf("soft delete v1: %v %v", vs, err)
	}
	if vs, _ := c.SchemaVersions(ctx, "orders", false); !slices.Equal(vs, []int{2}) {
		t.Errorf("live versions after soft delete: %v", vs)
	}
	if vs, _ := c.SchemaVersions(ctx, "orders", true); !slices.Equal(vs, []int{1, 2}) {
		t.Errorf("all versions after soft delete: %v", vs)
	}
	if s, err := c.Schema(ctx, id1); err != nil || s.Text != orderV1 {
		t.Errorf("a soft-deleted version's id stays readable: %+v %v", s, err)
	}
	_, err := c.DeleteSchema(ctx, "orders", "2", true)
	wantErr(t, "permanent delete of a live version", err, semaq.ErrSchemaVersionNotSoftDeleted)
	_, err = c.DeleteSchema(ctx, "orders", "", true)
	wantErr(t, "permanent delete of a live subject", err, semaq.ErrSchemaSubjectNotSoftDeleted)

	if vs, err := c.DeleteSchema(ctx, "orders", "", false); err != nil || !slices.Equal(vs, []int{2}) {
		t.Fatalf("soft delete subject: %v %v", vs, err)
	}
	if subs, _ := c.SchemaSubjects(ctx, false); len(subs) != 0 {
		t.Errorf("subjects after soft delete: %v", subs)
	}
	if subs, _ := c.SchemaSubjects(ctx, true); !slices.Equal(subs, []string{"orders"}) {
		t.Errorf("subjects with deleted: %v", subs)
	}
	_, err = c.SchemaVersion(ctx, "orders", "latest")
	wantErr(t, "read of a soft-deleted subject", err, semaq.ErrSchemaSubjectNotFound)
	_, err = c.DeleteSchema(ctx, "orders", "", false)
	wantErr(t, "soft delete twice", err, semaq.ErrSchemaSubjectSoftDeleted)

	if vs, err := c.DeleteSchema(ctx, "orders", "", true); err != nil || !slices.Equal(vs, []int{1, 2}) {
		t.Fatalf("permanent delete: %v %v", vs, err)
	}
	if subs, _ := c.SchemaSubjects(ctx, true); len(subs) != 0 {
		t.Errorf("subjects after permanent delete: %v", subs)
	}
	// This client read id1 before, and an id never changes meaning: it
	// keeps answering. A client that never read it gets 40403.
	if s, err := c.Schema(ctx, id1); err != nil || s.Text != orderV1 {
		t.Errorf("cached id after permanent delete: %+v %v", s, err)
	}
	_, err = brokertest.Connect(t, srv).Schema(ctx, id1)
	wantErr(t, "id of a permanently deleted schema", err, semaq.ErrSchemaIDNotFound)
	_, err = c.DeleteSchema(ctx, "orders", "x", false)
	wantErr(t, "bad version", err, semaq.ErrSchemaInvalidVersion)
}

func TestSchemaBindingsAndSchemaFor(t *testing.T) {
	c := schemaClient(t)
	ctx := testCtx(t)
	id1, _ := mustRegister(t, c, "orders", orderV1)
	mustRegister(t, c, "audit", `{"type":"object"}`)

	err := c.BindSchema(ctx, "ai.orders.>", "nope")
	wantErr(t, "bind to a missing subject", err, semaq.ErrSchemaSubjectNotFound)
	err = c.BindSchema(ctx, "ai..orders", "orders")
	wantErr(t, "bind a bad pattern", err, semaq.ErrSchemaInvalidBinding)

	for _, b := range [][2]string{{"ai.orders.>", "orders"}, {"ai.orders.audit", "audit"}} {
		if err := c.BindSchema(ctx, b[0], b[1]); err != nil {
			t.Fatalf("bind %s: %v", b[0], err)
		}
	}
	bs, err := c.SchemaBindings(ctx)
	want := []semaq.SchemaBinding{{Pattern: "ai.orders.>", Subject: "orders"}, {Pattern: "ai.orders.audit", Subject: "audit"}}
	if err != nil || !slices.Equal(bs, want) {
		t.Fatalf("bindings = %v, %v", bs, err)
	}

	l, err := c.SchemaFor(ctx, "ai.orders.eu")
	if err != nil {
		t.Fatal(err)
	}
	if *l != (semaq.SchemaLookup{Binding: want[0], ID: id1, Version: 1, SchemaType: "JSON"}) {
		t.Errorf("SchemaFor(ai.orders.eu) = %+v", *l)
	}
	if l, err := c.SchemaFor(ctx, "ai.orders.audit"); err != nil || l.Binding.Subject != "audit" {
		t.Errorf("the most specific binding wins: %+v %v", l, err)
	}
	// A client learns the current version: a new registration shows at once.
	id2, _ := mustRegister(t, c, "orders", orderV2)
	if l, err := c.SchemaFor(ctx, "ai.orders.eu"); err != nil || l.ID != id2 || l.Version != 2 {
		t.Errorf("after v2: %+v %v", l, err)
	}
	_, err = c.SchemaFor(ctx, "elsewhere.x")
	wantErr(t, "unbound subject", err, semaq.ErrSchemaBindingNotFound)
	_, err = c.SchemaFor(ctx, "ai.orders.*")
	wantErr(t, "wildcard subject", err, semaq.ErrBadRequest)

	if err := c.UnbindSchema(ctx, "ai.orders.>"); err != nil {
		t.Fatal(err)
	}
	err = c.UnbindSchema(ctx, "ai.orders.>")
	wantErr(t, "unbind twice", err, semaq.ErrSchemaBindingNotFound)
	_, err = c.SchemaFor(ctx, "ai.orders.eu")
	wantErr(t, "after unbind", err, semaq.ErrSchemaBindingNotFound)
	if bs, _ := c.SchemaBindings(ctx); len(bs) != 1 || bs[0].Pattern != "ai.orders.audit" {
		t.Errorf("bindings after unbind: %v", bs)
	}
}

// getSpy records the ids asked for on $SQ.API.SCHEMA.GET. A plain
// subscription gets a copy of every request the broker's queue group
// serves.
type getSpy struct {
	mu  sync.Mutex
	ids []int
	got chan struct{}
}

func spyOnGets(t *testing.T, nc *nats.Conn) *getSpy {
	t.Helper()
	spy := &getSpy{got: make(chan struct{}, 100)}
	sub, err := nc.Subscribe(semaq.APISchemaGet, func(m *nats.Msg) {
		var req semaq.SchemaGetRequest
		_ = json.Unmarshal(m.Data, &req)
		spy.mu.Lock()
		spy.ids = append(spy.ids, req.ID)
		spy.mu.Unlock()
		spy.got <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return spy
}

// wait returns the ids seen once n requests arrived.
func (s *getSpy) wait(t *testing.T, n int) []int {
	t.Helper()
	for {
		s.mu.Lock()
		ids := slices.Clone(s.ids)
		s.mu.Unlock()
		if len(ids) >= n {
			return ids
		}
		select {
		case <-s.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("spy saw %v, waiting for %d requests", ids, n)
		}
	}
}

func TestSchemaByIDIsCached(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := testCtx(t)
	id1, _ := mustRegister(t, c, "orders", orderV1)
	id2, _ := mustRegister(t, c, "other", `{"type":"string"}`)
	spy := spyOnGets(t, brokertest.Connect(t, s).Conn())

	first, err := c.Schema(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	spy.wait(t, 1)
	again, err := c.Schema(ctx, id1)
	if err != nil || again != first {
		t.Fatalf("second Schema(%d) = %p %v, want the cached %p", id1, again, err, first)
	}
	// A miss on another id is the barrier: requests from one connection
	// reach the spy in order, so had the second call gone to the broker,
	// the spy would have seen id1 again before id2.
	if _, err := c.Schema(ctx, id2); err != nil {
		t.Fatal(err)
	}
	if ids := spy.wait(t, 2); !slices.Equal(ids, []int{id1, id2}) {
		t.Errorf("requests seen: %v, want [%d %d]: the second Schema(%d) asked the broker", ids, id1, id2, id1)
	}
	// A version read primes the cache too, and misses are not cached.
	id3, _ := mustRegister(t, c, "orders", orderV2)
	if _, err := c.SchemaVersion(ctx, "orders", "latest"); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Schema(ctx, id3); err != nil || s.Text != orderV2 || s.Subject != "" {
		t.Errorf("Schema(%d) after SchemaVersion: %+v %v", id3, s, err)
	}
	for range 2 {
		if _, err := c.Schema(ctx, 999); !errors.Is(err, semaq.ErrSchemaIDNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	}
	if ids := spy.wait(t, 5); !slices.Equal(ids[2:], []int{0, 999, 999}) {
		t.Errorf("requests after the version read: %v, want the version read (id 0) and both misses", ids[2:])
	}
	// Another client has a cache of its own.
	if _, err := brokertest.Connect(t, s).Schema(ctx, id1); err != nil {
		t.Fatal(err)
	}
	if ids := spy.wait(t, 6); ids[5] != id1 {
		t.Errorf("another client's first Schema(%d) did not ask the broker: %v", id1, ids)
	}
}

func TestSchemaClientValidation(t *testing.T) {
	// Bad arguments are refused before anything is sent, with the code the
	// broker would give.
	c := schemaClient(t)
	ctx := testCtx(t)
	for name, opt := range map[string]client.SchemaOption{
		"unknown type":        client.WithSchemaType("xml"),
		"reference no name":   client.WithSchemaReferences(semaq.SchemaReference{Subject: "s", Version: 1}),
		"reference no subj":   client.WithSchemaReferences(semaq.SchemaReference{Name: "n", Version: 1}),
		"reference version 0": client.WithSchemaReferences(semaq.SchemaReference{Name: "n", Subject: "s"}),
	} {
		if _, _, err := c.RegisterSchema(ctx, "s", orderV1, opt); !errors.Is(err, semaq.ErrBadRequest) {
			t.Errorf("register, %s: %v, want ErrBadRequest", name, err)
		}
		if _, _, err := c.CheckSchema(ctx, "s", "", orderV1, opt); !errors.Is(err, semaq.ErrBadRequest) {
			t.Errorf("check, %s: %v, want ErrBadRequest", name, err)
		}
	}
	if _, _, err := c.RegisterSchema(ctx, "s", orderV1, client.WithSchemaType("xml")); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("unknown type error does not name it: %v", err)
	}
	for _, v := range []string{"0", "-1", "x", "", "2147483648"} {
		if _, err := c.SchemaVersion(ctx, "s", v); !errors.Is(err, semaq.ErrSchemaInvalidVersion) {
			t.Errorf("version %q: %v, want ErrSchemaInvalidVersion", v, err)
		}
	}
	if _, err := c.Schema(ctx, 0); !errors.Is(err, semaq.ErrBadRequest) {
		t.Errorf("Schema(0): %v", err)
	}
	if subs, err := c.SchemaSubjects(ctx, false); err != nil || subs == nil || len(subs) != 0 {
		t.Errorf("subjects of an empty registry: %#v %v", subs, err)
	}
}

func TestPublishWithSchemaID(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := testCtx(t)
	id, _ := mustRegister(t, c, "orders", orderV1)

	if _, err := c.Publish(ctx, "ai.orders", []byte(`{"id":"1"}`), client.WithSchemaID(0)); !errors.Is(err, semaq.ErrBadRequest) {
		t.Errorf("WithSchemaID(0): %v", err)
	}
	if _, err := c.Publish(ctx, "ai.orders", []byte(`{"id":"1"}`), client.WithSchemaID(id)); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "ai.orders")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(semaq.HdrSchemaID); got != strconv.Itoa(id) {
		t.Errorf("stored %s = %q, want %d", semaq.HdrSchemaID, got, id)
	}
	// A consumer negotiates the schema from the header.
	if sch, err := c.Schema(ctx, id); err != nil || sch.Text != orderV1 {
		t.Errorf("schema of the stored message: %+v %v", sch, err)
	}
}

func TestConfluentFrame(t *testing.T) {
	t.Parallel()
	payload := []byte{0x02, 0x61}
	f := client.ConfluentFrame(258, payload)
	if want := []byte{0, 0, 0, 1, 2, 0x02, 0x61}; !bytes.Equal(f, want) {
		t.Fatalf("frame = % x, want % x", f, want)
	}
	id, p, err := client.SplitConfluentFrame(f)
	if err != nil || id != 258 || !bytes.Equal(p, payload) {
		t.Fatalf("split = %d % x %v", id, p, err)
	}
	if id, p, err := client.SplitConfluentFrame(client.ConfluentFrame(7, nil)); err != nil || id != 7 || len(p) != 0 {
		t.Errorf("empty payload: %d %x %v", id, p, err)
	}
	for name, b := range map[string][]byte{
		"short":       {0, 0, 0, 1},
		"magic 1":     {1, 0, 0, 0, 1, 9},
		"id 0":        {0, 0, 0, 0, 0, 9},
		"id above 31": {0, 0x80, 0, 0, 0, 9},
		"json":        []byte(`{"a":1}`),
	} {
		if _, _, err := client.SplitConfluentFrame(b); !errors.Is(err, client.ErrNotConfluentFrame) {
			t.Errorf("%s: %v, want ErrNotConfluentFrame", name, err)
		}
	}
}

// Requests the SDK never sends, as another NATS client might.
func TestSchemaAPIRawRequests(t *testing.T) {
	c := schemaClient(t)
	ctx := testCtx(t)
	mustRegister(t, c, "orders", orderV1)
	for _, tc := range []struct {
		subj, body string
		want       *semaq.APIError
	}{
		{semaq.APISchemaGet, `not json`, semaq.ErrBadRequest},
		{semaq.APISchemaGet, `{"id":1,"subject":"orders"}`, semaq.ErrBadRequest},
		{semaq.APISchemaGet, ``, semaq.ErrBadRequest},
		{semaq.APISchemaGet, `{"subject":"orders","version":"-2"}`, semaq.ErrSchemaInvalidVersion},
		{semaq.APISchemaRegister, `{"subject":"orders","schema":"{}","schema_type":"xml"}`, semaq.ErrSchemaInvalid},
		{semaq.APISchemaRegister, `{"subject":"","schema":"{}"}`, semaq.ErrSchemaInvalidSubject},
		{semaq.APISchemaDelete, `{}`, semaq.ErrBadRequest},
		{semaq.APISchemaBind, `{"pattern":"ai.x"}`, semaq.ErrBadRequest},
		{semaq.APISchemaLookup, `{}`, semaq.ErrBadRequest},
	} {
		m, err := c.Conn().RequestWithContext(ctx, tc.subj, []byte(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		var r semaq.ErrorReply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Error == nil || !errors.Is(r.Error, tc.want) || r.Error.Code != tc.want.Code {
			t.Errorf("%s %s: %s, want %d/%d", tc.subj, tc.body, m.Data, tc.want.Code, tc.want.ErrCode)
		}
	}
	// The SemaQ API defaults to JSON Schema.
	m, err := c.Conn().RequestWithContext(ctx, semaq.APISchemaRegister, []byte(`{"subject":"plain","schema":"{\"type\":\"string\"}"}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg semaq.SchemaRegisterResponse
	if err := json.Unmarshal(m.Data, &reg); err != nil || reg.ID == 0 {
		t.Fatalf("register without a type: %s", m.Data)
	}
	if s, err := c.Schema(ctx, reg.ID); err != nil || s.Type != "JSON" {
		t.Errorf("type of a schema registered without one: %+v %v", s, err)
	}
}

func FuzzSplitConfluentFrame(f *testing.F) {
	f.Add(client.ConfluentFrame(1, []byte(`{"a":1}`)))
	f.Add([]byte{0, 0x7f, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, payload, err := client.SplitConfluentFrame(b)
		if err != nil {
			if !errors.Is(err, client.ErrNotConfluentFrame) {
				t.Fatalf("error %v does not match ErrNotConfluentFrame", err)
			}
			return
		}
		if id < 1 || !bytes.Equal(client.ConfluentFrame(id, payload), b) {
			t.Fatalf("split % x = %d % x, which does not frame back", b, id, payload)
		}
	})
}

// Runtime negotiation end to end: a producer learns the bound schema's id
// and tags its messages (header for JSON, Confluent frame for Avro); the
// ingress checks them; a consumer resolves the id it reads.
func TestSchemaNegotiation(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := testCtx(t)
	jsonID, _ := mustRegister(t, c, "orders", orderV1)
	avroID, _ := mustRegister(t, c, "events", `{"type":"record","name":"Event","fields":[{"name":"kind","type":"string"}]}`,
		client.WithSchemaType("AVRO"))
	for p, subj := range map[string]string{"ai.orders.>": "orders", "ai.events": "events"} {
		if err := c.BindSchema(ctx, p, subj); err != nil {
			t.Fatal(err)
		}
	}

	l, err := c.SchemaFor(ctx, "ai.orders.eu")
	if err != nil || l.ID != jsonID {
		t.Fatalf("SchemaFor(ai.orders.eu) = %+v %v", l, err)
	}
	if _, err := c.Publish(ctx, "ai.orders.eu", []byte(`{"id":"o-1","amount":3}`), client.WithSchemaID(l.ID)); err != nil {
		t.Fatalf("valid JSON payload: %v", err)
	}
	if _, err := c.Publish(ctx, "ai.orders.eu", []byte(`{"amount":3}`), client.WithSchemaID(l.ID)); !errors.Is(err, semaq.ErrSchema) {
		t.Errorf("JSON payload without its required id: %v, want ErrSchema", err)
	}

	l, err = c.SchemaFor(ctx, "ai.events")
	if err != nil || l.ID != avroID || l.SchemaType != "AVRO" {
		t.Fatalf("SchemaFor(ai.events) = %+v %v", l, err)
	}
	datum := []byte{0x08, 'b', 'o', 'o', 't'} // Avro: the string "boot" (zigzag length 4)
	if _, err := c.Publish(ctx, "ai.events", client.ConfluentFrame(l.ID, datum)); err != nil {
		t.Fatalf("framed Avro payload: %v", err)
	}
	if _, err := c.Publish(ctx, "ai.events", client.ConfluentFrame(l.ID, []byte{0x08, 'b'})); !errors.Is(err, semaq.ErrSchema) {
		t.Errorf("truncated Avro datum: %v, want ErrSchema", err)
	}

	sub, err := c.Subscribe(ctx, "ai.events")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, payload, err := client.SplitConfluentFrame(m.Data)
	if err != nil || id != avroID || !bytes.Equal(payload, datum) {
		t.Fatalf("consumed frame: id %d payload % x %v", id, payload, err)
	}
	if sch, err := c.Schema(ctx, id); err != nil || sch.Type != "AVRO" || !strings.Contains(sch.Text, `"Event"`) {
		t.Errorf("consumer's schema for id %d: %+v %v", id, sch, err)
	}
}
