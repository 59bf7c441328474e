package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/internal/schema/formats"
)

// fakeFormat is a test-only format, so these tests do not depend on the
// real ones: a schema is any JSON document, its canonical form the compact
// JSON, every payload valid, and a change incompatible when the reader's
// top-level "required" array names a field the writer's does not.
type fakeFormat struct{ typ schema.Type }

type fakeSchema struct {
	typ       schema.Type
	canonical string
	required  []string
}

func (f fakeFormat) Type() schema.Type { return f.typ }

func (f fakeFormat) Parse(text string, refs []schema.Reference, resolve schema.Resolver) (schema.Schema, error) {
	var doc struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(text)); err != nil {
		return nil, err
	}
	for _, ref := range refs {
		if resolve == nil {
			return nil, fmt.Errorf("reference %q without a resolver", ref.Name)
		}
		if _, _, _, err := resolve(ref); err != nil {
			return nil, err
		}
	}
	return &fakeSchema{typ: f.typ, canonical: b.String(), required: doc.Required}, nil
}

func (f fakeFormat) Compatibility(reader, writer schema.Schema) []schema.Incompatibility {
	rd, wr := reader.(*fakeSchema), writer.(*fakeSchema)
	var out []schema.Incompatibility
	for _, name := range rd.required {
		if !slices.Contains(wr.required, name) {
			out = append(out, schema.Incompatibility{
				Path: "#/required", Rule: "REQUIRED_ATTRIBUTE_ADDED",
				Message: fmt.Sprintf("required property %q added", name),
			})
		}
	}
	return out
}

func (s *fakeSchema) Type() schema.Type             { return s.typ }
func (s *fakeSchema) Canonical() string             { return s.canonical }
func (s *fakeSchema) Validate(payload []byte) error { return nil }

// fakeFormats replaces JSON and AVRO with the fake format.
func fakeFormats() *schema.Formats {
	fs := formats.Default().Clone()
	fs.Register(fakeFormat{typ: schema.TypeJSON})
	fs.Register(fakeFormat{typ: schema.TypeAvro})
	return fs
}

// node is a NATS server with JetStream and a connection to it.
type node struct {
	dir string
	ns  *server.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

// startNode runs a JetStream server on 127.0.0.1 storing in dir (a new
// temporary directory when ""). It stops at the end of the test.
func startNode(t testing.TB, dir string) *node {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{dir: dir, ns: ns, nc: nc, js: js}
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	n.nc.Close()
	n.ns.Shutdown()
	n.ns.WaitForShutdown()
}

// conn returns another JetStream context on the node, on its own connection.
func (n *node) conn(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(n.ns.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open opens a registry with the fake formats, closed at the end of the
// test.
func open(t testing.TB, js jetstream.JetStream) *Registry {
	t.Helper()
	r, err := Open(ctxT(t), js, Config{Formats: fakeFormats()})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// newRegistry starts a node and opens a registry on it.
func newRegistry(t testing.TB) (*Registry, *node) {
	t.Helper()
	n := startNode(t, "")
	return open(t, n.js), n
}

// waitFor waits until cond holds on r's snapshot, woken by every new
// snapshot rather than by a timer.
func waitFor(t testing.TB, r *Registry, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		ch := r.state.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func register(t testing.TB, r *Registry, subject, text string, refs ...schema.Reference) int {
	t.Helper()
	id, err := r.Register(ctxT(t), subject, SchemaRequest{Schema: text, SchemaType: "JSON", References: refs}, false)
	if err != nil {
		t.Fatalf("register %s %s: %v", subject, text, err)
	}
	return id
}

// wantCode fails unless err is an *Error with the code.
func wantCode(t testing.TB, err error, code int) {
	t.Helper()
	e, ok := err.(*Error)
	if !ok {
		t.Fatalf("error %v (%T), want code %d", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("error %v, want code %d", e, code)
	}
}

// rest is a client of a registry's REST API.
type rest struct {
	t   testing.TB
	url string
}

func newREST(t testing.TB, r *Registry) *rest {
	srv := httptest.NewServer(r.Handler())
	t.Cleanup(srv.Close)
	return &rest{t: t, url: srv.URL}
}

// do sends a request with Confluent's media type and returns the status
// and body.
func (c *rest) do(method, path, body string) (int, string) {
	c.t.Helper()
	return c.doType(method, path, body, ContentType)
}

func (c *rest) doType(method, path, body, contentType string) (int, string) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctxT(c.t), method, c.url+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		c.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// want sends a request and checks the status and the JSON body (compared
// as JSON values).
func (c *rest) want(method, path, body string, status int, want string) {
	c.t.Helper()
	got, b := c.do(method, path, body)
	if got != status {
		c.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, status, b)
	}
	if want != "" && !jsonEqual(b, want) {
		c.t.Fatalf("%s %s: body\n%s\nwant\n%s", method, path, b, want)
	}
}

// wantErr sends a request and checks Confluent's error body.
func (c *rest) wantErr(method, path, body string, code int) string {
	c.t.Helper()
	got, b := c.do(method, path, body)
	var e Error
	if err := json.Unmarshal([]byte(b), &e); err != nil {
		c.t.Fatalf("%s %s: error body %q: %v", method, path, b, err)
	}
	if e.Code != code || got != e.Status() || e.Message == "" {
		c.t.Fatalf("%s %s: status %d body %s, want error_code %d", method, path, got, b, code)
	}
	return e.Message
}

func jsonEqual(a, b string) bool {
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

// body renders a register/lookup body for a JSON-typed schema.
func body(schemaText string, refs ...schema.Reference) string {
	b, _ := json.Marshal(SchemaRequest{Schema: schemaText, SchemaType: "JSON", References: refs})
	return string(b)
}
