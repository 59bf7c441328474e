package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

func TestRESTSchemasAndSubjects(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)

	types, _ := json.Marshal(r.formats.Types())
	c.want("GET", "/schemas/types", "", 200, string(types))
	c.want("GET", "/subjects", "", 200, `[]`)

	c.want("POST", "/subjects/orders-value/versions", body(`{"type":"object"}`), 200, `{"id":1}`)
	// Avro is the type when schemaType is missing; answers omit it.
	c.want("POST", "/subjects/avro-value/versions", `{"schema":"{\"type\":\"string\"}"}`, 200, `{"id":2}`)
	c.want("POST", "/subjects/orders-value/versions", body(`{"type":"object","title":"v2"}`), 200, `{"id":3}`)
	// The same schema elsewhere: the same id; identical again: no version.
	c.want("POST", "/subjects/other/versions", body(`{"type":"object"}`), 200, `{"id":1}`)
	c.want("POST", "/subjects/orders-value/versions", body(`{"type":"object"}`), 200, `{"id":1}`)
	// Unknown fields of newer clients are ignored.
	c.want("POST", "/subjects/orders-value/versions", `{"schema":"{\"type\":\"object\"}","schemaType":"JSON","metadata":null,"ruleSet":null}`, 200, `{"id":1}`)

	c.want("GET", "/schemas/ids/1", "", 200, `{"schema":"{\"type\":\"object\"}","schemaType":"JSON"}`)
	c.want("GET", "/schemas/ids/1?subject=orders-value", "", 200, `{"schema":"{\"type\":\"object\"}","schemaType":"JSON"}`)
	c.want("GET", "/schemas/ids/2", "", 200, `{"schema":"{\"type\":\"string\"}"}`)
	if status, b := c.do("GET", "/schemas/ids/1/schema", ""); status != 200 || b != `{"type":"object"}` {
		t.Fatalf("raw schema: %d %s", status, b)
	}
	c.want("GET", "/schemas/ids/1/versions", "", 200, `[{"subject":"orders-value","version":1},{"subject":"other","version":1}]`)
	c.want("GET", "/schemas/ids/1/subjects", "", 200, `["orders-value","other"]`)
	c.wantErr("GET", "/schemas/ids/99", "", CodeSchemaNotFound)
	c.wantErr("GET", "/schemas/ids/x", "", CodeSchemaNotFound)
	c.wantErr("GET", "/schemas/ids/99/schema", "", CodeSchemaNotFound)
	c.wantErr("GET", "/schemas/ids/99/versions", "", CodeSchemaNotFound)

	c.want("GET", "/subjects", "", 200, `["avro-value","orders-value","other"]`)
	c.want("GET", "/subjects?subjectPrefix=o", "", 200, `["orders-value","other"]`)
	c.want("GET", "/subjects?subjectPrefix=:*:", "", 200, `["avro-value","orders-value","other"]`)
	c.want("GET", "/subjects/orders-value/versions", "", 200, `[1,2]`)
	c.wantErr("GET", "/subjects/nope/versions", "", CodeSubjectNotFound)

	c.want("GET", "/subjects/orders-value/versions/1", "", 200,
		`{"subject":"orders-value","version":1,"id":1,"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`)
	c.want("GET", "/subjects/orders-value/versions/latest", "", 200,
		`{"subject":"orders-value","version":2,"id":3,"schemaType":"JSON","schema":"{\"type\":\"object\",\"title\":\"v2\"}"}`)
	c.want("GET", "/subjects/orders-value/versions/-1", "", 200,
		`{"subject":"orders-value","version":2,"id":3,"schemaType":"JSON","schema":"{\"type\":\"object\",\"title\":\"v2\"}"}`)
	c.want("GET", "/subjects/avro-value/versions/1", "", 200,
		`{"subject":"avro-value","version":1,"id":2,"schema":"{\"type\":\"string\"}"}`)
	if status, b := c.do("GET", "/subjects/orders-value/versions/2/schema", ""); status != 200 || b != `{"type":"object","title":"v2"}` {
		t.Fatalf("raw version schema: %d %s", status, b)
	}
	c.wantErr("GET", "/subjects/orders-value/versions/9", "", CodeVersionNotFound)
	c.wantErr("GET", "/subjects/orders-value/versions/0", "", CodeInvalidVersion)
	c.wantErr("GET", "/subjects/orders-value/versions/first", "", CodeInvalidVersion)
	c.wantErr("GET", "/subjects/nope/versions/1", "", CodeSubjectNotFound)
	c.wantErr("GET", "/subjects/nope/versions/1/schema", "", CodeSubjectNotFound)

	// Lookup.
	c.want("POST", "/subjects/orders-value", body(`{ "type": "object" }`), 200,
		`{"subject":"orders-value","version":1,"id":1,"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`)
	c.wantErr("POST", "/subjects/orders-value", body(`{"type":"array"}`), CodeSchemaNotFound)
	c.wantErr("POST", "/subjects/nope", body(`{"type":"object"}`), CodeSubjectNotFound)
	c.wantErr("POST", "/subjects/orders-value", body(`{`), CodeInvalidSchema)

	// Bad registrations.
	c.wantErr("POST", "/subjects/orders-value/versions", body(`{`), CodeInvalidSchema)
	c.wantErr("POST", "/subjects/orders-value/versions", `{"schema":"{}","schemaType":"XML"}`, CodeInvalidSchema)
	c.wantErr("POST", "/subjects/orders-value/versions", `{"schema":""}`, CodeInvalidSchema)
	c.wantErr("POST", "/subjects/orders-value/versions", `{"schema":`, CodeUnprocessable)
	c.wantErr("POST", "/subjects/orders-value/versions", ``, CodeUnprocessable)
	c.wantErr("POST", "/subjects/orders-value/versions", `{} {}`, CodeUnprocessable)
	c.wantErr("POST", "/subjects/%01/versions", body(`{}`), CodeInvalidSubject)
}

func TestRESTSubjectNamesAreEncoded(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	for _, subject := range []string{"a.b", "a:b", "a/b", "a b", "ünï", "x-value", "%"} {
		p := "/subjects/" + url.PathEscape(subject)
		if subject == "a/b" {
			p = "/subjects/a%2Fb"
		}
		status, b := c.do("POST", p+"/versions", body(fmt.Sprintf(`{"s":%q}`, subject)))
		if status != 200 {
			t.Fatalf("register %q: %d %s", subject, status, b)
		}
		if _, err := r.Version(ctxT(t), subject, "1", false); err != nil {
			t.Fatalf("subject %q not stored under its name: %v", subject, err)
		}
		want, _ := json.Marshal([]string{subject})
		c.want("GET", p+"/versions/1", "", 200, "")
		c.want("GET", "/schemas/ids/"+strings.TrimPrefix(strings.TrimSuffix(b, "}"), `{"id":`)+"/subjects", "", 200, string(want))
	}
}

func TestRESTDeletes(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	for i := 1; i <= 3; i++ {
		c.want("POST", "/subjects/d/versions", body(fmt.Sprintf(`{"v":%d}`, i)), 200, fmt.Sprintf(`{"id":%d}`, i))
	}
	c.wantErr("DELETE", "/subjects/d/versions/2?permanent=true", "", CodeVersionNotSoftDeleted)
	c.want("DELETE", "/subjects/d/versions/2", "", 200, `2`)
	c.wantErr("DELETE", "/subjects/d/versions/2", "", CodeVersionSoftDeleted)
	c.wantErr("DELETE", "/subjects/d/versions/9", "", CodeVersionNotFound)
	c.wantErr("DELETE", "/subjects/d/versions/zero", "", CodeInvalidVersion)
	c.wantErr("DELETE", "/subjects/nope/versions/1", "", CodeSubjectNotFound)
	c.want("GET", "/subjects/d/versions", "", 200, `[1,3]`)
	c.want("GET", "/subjects/d/versions?deleted=true", "", 200, `[1,2,3]`)
	c.wantErr("GET", "/subjects/d/versions/2", "", CodeVersionNotFound)
	c.want("GET", "/subjects/d/versions/2?deleted=true", "", 200, `{"subject":"d","version":2,"id":2,"schemaType":"JSON","schema":"{\"v\":2}"}`)
	c.want("GET", "/schemas/ids/2", "", 200, `{"schema":"{\"v\":2}","schemaType":"JSON"}`)
	c.want("GET", "/schemas/ids/2/versions", "", 200, `[]`)
	c.want("GET", "/schemas/ids/2/versions?deleted=true", "", 200, `[{"subject":"d","version":2}]`)
	c.want("DELETE", "/subjects/d/versions/2?permanent=true", "", 200, `2`)
	c.wantErr("GET", "/schemas/ids/2", "", CodeSchemaNotFound)

	c.wantErr("DELETE", "/subjects/d?permanent=true", "", CodeSubjectNotSoftDeleted)
	c.want("DELETE", "/subjects/d", "", 200, `[1,3]`)
	c.wantErr("DELETE", "/subjects/d", "", CodeSubjectSoftDeleted)
	c.want("GET", "/subjects", "", 200, `[]`)
	c.want("GET", "/subjects?deleted=true", "", 200, `["d"]`)
	c.wantErr("GET", "/subjects/d/versions", "", CodeSubjectNotFound)
	c.wantErr("GET", "/subjects/d/versions/latest", "", CodeSubjectNotFound)
	c.want("GET", "/subjects/d/versions/latest?deleted=true", "", 200, `{"subject":"d","version":3,"id":3,"schemaType":"JSON","schema":"{\"v\":3}"}`)
	c.want("DELETE", "/subjects/d?permanent=true", "", 200, `[1,3]`)
	c.want("GET", "/subjects?deleted=true", "", 200, `[]`)
	c.wantErr("DELETE", "/subjects/d", "", CodeSubjectNotFound)
}

func TestRESTConfig(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	c.want("GET", "/config", "", 200, `{"compatibilityLevel":"BACKWARD"}`)
	c.want("PUT", "/config", `{"compatibility":"full"}`, 200, `{"compatibility":"FULL"}`)
	c.want("GET", "/config", "", 200, `{"compatibilityLevel":"FULL"}`)
	c.wantErr("GET", "/config/s", "", CodeSubjectCompatNotConfigured)
	c.want("GET", "/config/s?defaultToGlobal=true", "", 200, `{"compatibilityLevel":"FULL"}`)
	c.want("PUT", "/config/s", `{"compatibility":"NONE"}`, 200, `{"compatibility":"NONE"}`)
	c.want("GET", "/config/s", "", 200, `{"compatibilityLevel":"NONE"}`)
	c.wantErr("PUT", "/config/s", `{"compatibility":"SIDEWAYS"}`, CodeInvalidCompatibility)
	c.wantErr("PUT", "/config/s", `{}`, CodeInvalidCompatibility)
	c.wantErr("PUT", "/config", `nope`, CodeUnprocessable)
	c.want("DELETE", "/config/s", "", 200, `{"compatibilityLevel":"NONE"}`)
	c.wantErr("DELETE", "/config/s", "", CodeSubjectNotFound)
	c.want("DELETE", "/config", "", 200, `{"compatibilityLevel":"FULL"}`)
	c.want("GET", "/config", "", 200, `{"compatibilityLevel":"BACKWARD"}`)
	c.want("GET", "/mode", "", 200, `{"mode":"READWRITE"}`)
	c.want("GET", "/mode/s", "", 200, `{"mode":"READWRITE"}`)
}

func TestRESTCompatibility(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	v1, v2 := body(`{"required":["a"]}`), body(`{"required":["a","b"]}`)
	// No versions yet: anything is compatible with "every version".
	c.want("POST", "/compatibility/subjects/c/versions", v2, 200, `{"is_compatible":true}`)
	c.wantErr("POST", "/compatibility/subjects/c/versions/latest", v2, CodeSubjectNotFound)
	c.want("POST", "/subjects/c/versions", v1, 200, `{"id":1}`)
	c.want("POST", "/compatibility/subjects/c/versions/latest", v2, 200, `{"is_compatible":false}`)
	c.want("POST", "/compatibility/subjects/c/versions/1?verbose=true", v2, 200,
		`{"is_compatible":false,"messages":["REQUIRED_ATTRIBUTE_ADDED at #/required: new schema cannot read data written with version 1: required property \"b\" added"]}`)
	c.want("POST", "/compatibility/subjects/c/versions?verbose=true", v1, 200, `{"is_compatible":true,"messages":[]}`)
	c.wantErr("POST", "/compatibility/subjects/c/versions/7", v2, CodeVersionNotFound)
	c.wantErr("POST", "/compatibility/subjects/c/versions/x", v2, CodeInvalidVersion)
	c.wantErr("POST", "/compatibility/subjects/c/versions/latest", body(`{`), CodeInvalidSchema)

	msg := c.wantErr("POST", "/subjects/c/versions", v2, CodeIncompatible)
	if !strings.Contains(msg, "REQUIRED_ATTRIBUTE_ADDED") || !strings.Contains(msg, `required property \"b\" added`) && !strings.Contains(msg, `required property "b" added`) {
		t.Fatalf("409 message without reasons: %s", msg)
	}
	c.want("PUT", "/config/c", `{"compatibility":"NONE"}`, 200, "")
	c.want("POST", "/compatibility/subjects/c/versions/latest", v2, 200, `{"is_compatible":true}`)
	c.want("POST", "/subjects/c/versions", v2, 200, `{"id":2}`)
}

func TestRESTReferences(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	ref := schema.Reference{Name: "addr.json", Subject: "addr", Version: 1}
	c.want("POST", "/subjects/addr/versions", body(`{"title":"addr"}`), 200, `{"id":1}`)
	c.want("POST", "/subjects/cust/versions", body(`{"title":"cust"}`, ref), 200, `{"id":2}`)
	c.want("GET", "/schemas/ids/2", "", 200,
		`{"schema":"{\"title\":\"cust\"}","schemaType":"JSON","references":[{"name":"addr.json","subject":"addr","version":1}]}`)
	c.want("GET", "/subjects/cust/versions/1", "", 200,
		`{"subject":"cust","version":1,"id":2,"schemaType":"JSON","schema":"{\"title\":\"cust\"}","references":[{"name":"addr.json","subject":"addr","version":1}]}`)
	c.want("GET", "/subjects/addr/versions/1/referencedby", "", 200, `[2]`)
	c.want("GET", "/subjects/cust/versions/1/referencedby", "", 200, `[]`)
	c.wantErr("GET", "/subjects/addr/versions/2/referencedby", "", CodeVersionNotFound)
	c.wantErr("POST", "/subjects/cust/versions", body(`{"title":"x"}`, schema.Reference{Name: "n", Subject: "addr", Version: 5}), CodeInvalidSchema)
	c.wantErr("DELETE", "/subjects/addr/versions/1", "", CodeReferenceExists)
	c.wantErr("DELETE", "/subjects/addr", "", CodeReferenceExists)
}

func TestRESTMediaTypesAndRoutes(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	c := newREST(t, r)
	for i, ct := range []string{ContentType, "application/vnd.schemaregistry+json", "application/json", "application/json; charset=utf-8", "application/octet-stream"} {
		status, b := c.doType("POST", "/subjects/m/versions", body(fmt.Sprintf(`{"i":%d}`, i)), ct)
		if status != 200 {
			t.Errorf("Content-Type %q: %d %s", ct, status, b)
		}
	}
	status, b := c.doType("POST", "/subjects/m/versions", body(`{}`), "text/plain")
	if status != 415 || !jsonEqual(b, `{"error_code":415,"message":"HTTP 415 Unsupported Media Type: text/plain"}`) {
		t.Fatalf("text/plain: %d %s", status, b)
	}
	c.wantErr("GET", "/nothing/here", "", http.StatusNotFound)
	c.wantErr("PATCH", "/subjects/m/versions", "", http.StatusMethodNotAllowed)
}

func TestRouteOnSharedMux(t *testing.T) {
	t.Parallel()
	r, _ := newRegistry(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, _ *http.Request) {})
	r.Routes(mux) // panics on a pattern conflict
	if _, pattern := mux.Handler(httptestRequest("GET", "/subjects/x/versions/1")); pattern != "GET /subjects/{subject}/versions/{version}" {
		t.Fatalf("routed to %q", pattern)
	}
}

func httptestRequest(method, path string) *http.Request {
	req, _ := http.NewRequest(method, path, nil)
	return req
}
