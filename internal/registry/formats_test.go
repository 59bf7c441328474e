package registry

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// These tests use the real formats of formats.Default(), as a Confluent
// client would meet them through the REST API.

func realRegistry(t *testing.T) (*Registry, *rest) {
	t.Helper()
	n := startNode(t, "")
	r, err := Open(ctxT(t), n.js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, newREST(t, r)
}

func typedBody(typ, text string, refs ...schema.Reference) string {
	b, _ := json.Marshal(SchemaRequest{Schema: text, SchemaType: typ, References: refs})
	return string(b)
}

func TestRealJSONSchema(t *testing.T) {
	t.Parallel()
	r, c := realRegistry(t)
	c.want("GET", "/schemas/types", "", 200, `["AVRO","JSON","PROTOBUF"]`)

	v1 := `{"type":"object","properties":{"name":{"type":"string"}}}`
	c.want("POST", "/subjects/person-value/versions", typedBody("JSON", v1), 200, `{"id":1}`)
	// Whitespace and key order do not make another schema.
	c.want("POST", "/subjects/other/versions", typedBody("JSON", `{ "properties": {"name": {"type": "string"}}, "type": "object" }`), 200, `{"id":1}`)
	c.want("POST", "/subjects/person-value", typedBody("JSON", v1), 200,
		`{"subject":"person-value","version":1,"id":1,"schemaType":"JSON","schema":`+quote(v1)+`}`)

	// A property changing type breaks BACKWARD.
	changed := `{"type":"object","properties":{"name":{"type":"integer"}}}`
	msg := c.wantErr("POST", "/subjects/person-value/versions", typedBody("JSON", changed), CodeIncompatible)
	if !strings.Contains(msg, "TYPE_CHANGED") {
		t.Fatalf("409 without the reason: %s", msg)
	}
	status, b := c.do("POST", "/compatibility/subjects/person-value/versions/latest?verbose=true", typedBody("JSON", changed))
	var verdict struct {
		IsCompatible bool     `json:"is_compatible"`
		Messages     []string `json:"messages"`
	}
	if err := json.Unmarshal([]byte(b), &verdict); status != 200 || err != nil || verdict.IsCompatible || len(verdict.Messages) == 0 {
		t.Fatalf("verbose check: %d %s", status, b)
	}
	// A property added to an open content model is not (old data may hold
	// anything under its name), to a closed one it is.
	openModel := `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}}}`
	c.wantErr("POST", "/subjects/person-value/versions", typedBody("JSON", openModel), CodeIncompatible)
	c.want("PUT", "/config/person-value", `{"compatibility":"NONE"}`, 200, "")
	closed1 := `{"type":"object","properties":{"name":{"type":"string"}},"additionalProperties":false}`
	c.want("POST", "/subjects/person-value/versions", typedBody("JSON", closed1), 200, `{"id":2}`)
	c.want("DELETE", "/config/person-value", "", 200, "")
	v2 := `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"additionalProperties":false}`
	c.want("POST", "/subjects/person-value/versions", typedBody("JSON", v2), 200, `{"id":3}`)
	c.wantErr("POST", "/subjects/person-value/versions", typedBody("JSON", `{"type":"nonsense"}`), CodeInvalidSchema)

	// The compiled schema validates payloads for the ingress.
	e, v, ok := r.Latest("person-value")
	if !ok || v != 3 || e.Compiled == nil {
		t.Fatalf("Latest = %+v %d %v", e, v, ok)
	}
	if err := e.Compiled.Validate([]byte(`{"name":"ada","age":36}`)); err != nil {
		t.Fatalf("valid payload refused: %v", err)
	}
	if err := e.Compiled.Validate([]byte(`{"name":"ada","age":"old"}`)); !errors.Is(err, schema.ErrInvalidPayload) {
		t.Fatalf("invalid payload: %v", err)
	}
}

func TestRealJSONSchemaReferences(t *testing.T) {
	t.Parallel()
	r, c := realRegistry(t)
	addr := `{"type":"object","properties":{"street":{"type":"string"}},"required":["street"]}`
	c.want("POST", "/subjects/address/versions", typedBody("JSON", addr), 200, `{"id":1}`)
	cust := `{"type":"object","properties":{"address":{"$ref":"address.json"}}}`
	ref := schema.Reference{Name: "address.json", Subject: "address", Version: 1}
	c.want("POST", "/subjects/customer/versions", typedBody("JSON", cust, ref), 200, `{"id":2}`)
	c.wantErr("POST", "/subjects/customer2/versions", typedBody("JSON", cust), CodeInvalidSchema)

	e, ok := r.Cached(2)
	if !ok || e.Compiled == nil {
		t.Fatalf("Cached(2) = %+v %v", e, ok)
	}
	if err := e.Compiled.Validate([]byte(`{"address":{"street":"Main"}}`)); err != nil {
		t.Fatalf("valid payload refused: %v", err)
	}
	if err := e.Compiled.Validate([]byte(`{"address":{}}`)); !errors.Is(err, schema.ErrInvalidPayload) {
		t.Fatalf("payload missing a referenced required field: %v", err)
	}
}

func TestRealAvro(t *testing.T) {
	t.Parallel()
	r, c := realRegistry(t)
	v1 := `{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}`
	// Confluent's Avro serializers send no schemaType; answers omit it.
	c.want("POST", "/subjects/user-value/versions", `{"schema":`+quote(v1)+`}`, 200, `{"id":1}`)
	status, b := c.do("GET", "/schemas/ids/1", "")
	if status != 200 || strings.Contains(b, "schemaType") {
		t.Fatalf("GET /schemas/ids/1: %d %s", status, b)
	}
	// A new field without a default cannot read old data.
	noDefault := `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"}]}`
	c.wantErr("POST", "/subjects/user-value/versions", `{"schema":`+quote(noDefault)+`}`, CodeIncompatible)
	withDefault := `{"type":"record","name":"User","fields":[{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}`
	c.want("POST", "/subjects/user-value/versions", `{"schema":`+quote(withDefault)+`}`, 200, `{"id":2}`)
	if e, _, ok := r.Latest("user-value"); !ok || e.SchemaType != "AVRO" || e.Compiled == nil {
		t.Fatalf("Latest = %+v %v", e, ok)
	}
}

func TestRealProtobuf(t *testing.T) {
	t.Parallel()
	r, c := realRegistry(t)
	proto := "syntax = \"proto3\";\npackage demo;\nmessage Order { string id = 1; int64 amount = 2; }\n"
	c.want("POST", "/subjects/order-value/versions", typedBody("PROTOBUF", proto), 200, `{"id":1}`)
	c.want("GET", "/subjects/order-value/versions/1", "", 200,
		`{"subject":"order-value","version":1,"id":1,"schemaType":"PROTOBUF","schema":`+quote(proto)+`}`)
	if e, ok := r.Cached(1); !ok || e.Compiled == nil || e.SchemaType != "PROTOBUF" {
		t.Fatalf("Cached(1) = %+v %v", e, ok)
	}
	c.wantErr("POST", "/subjects/order-value/versions", typedBody("PROTOBUF", "message {"), CodeInvalidSchema)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
