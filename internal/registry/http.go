package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/schema"
)

// ContentType is the media type of every answer, as Confluent sends it.
const ContentType = "application/vnd.schemaregistry.v1+json"

// requestTimeout bounds one REST request against JetStream.
const requestTimeout = 10 * time.Second

// bodyLimits bound a request body's JSON beyond its size: a body is a
// schema request or a compatibility level, flat but for references.
var bodyLimits = schema.Limits{MaxDepth: 8}

// maxBody bounds a request body: room for a schema of MaxSchemaBytes with
// its JSON string escapes.
func (r *Registry) maxBody() int64 { return 2*int64(r.cfg.Limits.MaxSchemaBytes) + 64<<10 }

// Routes registers Confluent Schema Registry's REST API on mux, at the
// root (/subjects, /schemas, /config, /compatibility, /mode). Answers and
// errors are Confluent's JSON; see docs/schema-registry.md.
func (r *Registry) Routes(mux *http.ServeMux) {
	handle := func(pattern string, fn func(*http.Request) (any, error)) {
		mux.HandleFunc(pattern, r.serve(fn))
	}
	handle("GET /schemas/types", r.getTypes)
	handle("GET /schemas/ids/{id}", r.getSchemaByID)
	handle("GET /schemas/ids/{id}/schema", r.getRawSchemaByID)
	handle("GET /schemas/ids/{id}/versions", r.getVersionsByID)
	handle("GET /schemas/ids/{id}/subjects", r.getSubjectsByID)
	handle("GET /subjects", r.getSubjects)
	handle("GET /subjects/{subject}/versions", r.getVersions)
	handle("POST /subjects/{subject}/versions", r.postVersion)
	handle("GET /subjects/{subject}/versions/{version}", r.getVersion)
	handle("GET /subjects/{subject}/versions/{version}/schema", r.getRawVersion)
	handle("GET /subjects/{subject}/versions/{version}/referencedby", r.getReferencedBy)
	handle("POST /subjects/{subject}", r.postLookup)
	handle("DELETE /subjects/{subject}", r.deleteSubject)
	handle("DELETE /subjects/{subject}/versions/{version}", r.deleteVersion)
	handle("GET /config", r.getConfig)
	handle("PUT /config", r.putConfig)
	handle("DELETE /config", r.deleteConfig)
	handle("GET /config/{subject}", r.getConfig)
	handle("PUT /config/{subject}", r.putConfig)
	handle("DELETE /config/{subject}", r.deleteConfig)
	handle("POST /compatibility/subjects/{subject}/versions/{version}", r.postCompatibility)
	handle("POST /compatibility/subjects/{subject}/versions", r.postCompatibility)
	handle("GET /mode", r.getMode)
	handle("GET /mode/{subject}", r.getMode)
	handle("GET /contexts", r.getContexts)
	// Anything else under the registry's paths gets Confluent's 404/405, so
	// a Confluent client reports the error instead of an empty one, even
	// where the registry shares a mux with other endpoints.
	for _, p := range Paths {
		mux.HandleFunc(p, notFound(mux))
	}
}

// Paths are the path prefixes the REST API serves under: Routes answers
// everything below them, Confluent's 404 or 405 where no route matches.
var Paths = []string{"/subjects", "/subjects/", "/schemas/", "/config", "/config/",
	"/compatibility/", "/mode", "/mode/", "/contexts", "/contexts/"}

// getContexts lists schema contexts: the registry has only the default one.
func (r *Registry) getContexts(*http.Request) (any, error) { return []string{"."}, nil }

// notFound answers Confluent's 405 when another method has an endpoint at
// the path (every endpoint pattern names its method), else 404.
func notFound(mux *http.ServeMux) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		var allowed []string
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
			probe := req.Clone(req.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); strings.Contains(pattern, " ") {
				allowed = append(allowed, m)
			}
		}
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, &Error{Code: http.StatusMethodNotAllowed, Message: "HTTP 405 Method Not Allowed"})
			return
		}
		writeError(w, &Error{Code: http.StatusNotFound, Message: "HTTP 404 Not Found"})
	}
}

// Handler is the REST API alone: Routes on a mux of its own, with
// Confluent's JSON 404 and 405 for anything else. Mount it under a prefix
// with http.StripPrefix.
func (r *Registry) Handler() http.Handler {
	mux := http.NewServeMux()
	r.Routes(mux)
	mux.HandleFunc("/", notFound(mux))
	return mux
}

// raw is an answer written as it is (the /schema endpoints).
type raw string

// serve adapts an endpoint: checks the request media type, bounds the
// request in time and size, writes the answer or the Confluent error.
func (r *Registry) serve(fn func(*http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost || req.Method == http.MethodPut {
			if err := checkMediaType(req.Header.Get("Content-Type")); err != nil {
				writeError(w, err)
				return
			}
			req.Body = http.MaxBytesReader(w, req.Body, r.maxBody())
		}
		ctx, cancel := context.WithTimeout(req.Context(), requestTimeout)
		defer cancel()
		v, err := fn(req.WithContext(ctx))
		if err != nil {
			coded, ok := errors.AsType[*Error](err)
			if !ok {
				coded = errorf(CodeStore, "%v", err)
			}
			writeError(w, coded)
			return
		}
		if s, ok := v.(raw); ok {
			w.Header().Set("Content-Type", ContentType)
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, string(s))
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// checkMediaType accepts the media types Confluent accepts. Confluent
// clients (Java, Go, Python) all send application/vnd.schemaregistry.v1+json.
// A request without Content-Type is refused: a browser sends one without
// it (a Blob body) cross-site without a CORS preflight, and so could change
// the registry from a page its user visits.
func checkMediaType(ct string) *Error {
	if ct == "" {
		return &Error{Code: http.StatusUnsupportedMediaType, Message: "HTTP 415 Unsupported Media Type: a Content-Type is required (application/vnd.schemaregistry.v1+json or application/json)"}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		switch mt {
		case ContentType, "application/vnd.schemaregistry+json", "application/json", "application/octet-stream":
			return nil
		}
	}
	return &Error{Code: http.StatusUnsupportedMediaType, Message: "HTTP 415 Unsupported Media Type: " + ct}
}

func writeError(w http.ResponseWriter, e *Error) { writeJSON(w, e.Status(), e) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a bug can get here: every answer is a plain value.
		status = http.StatusInternalServerError
		b.Reset()
		_ = enc.Encode(errorf(CodeStore, "encoding the answer: %v", err))
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// decode reads a JSON body strictly: bounded (serve caps the size), no
// key twice in an object nor two keys equal but for case, no key spelled
// in another case than the field it would set (encoding/json would match
// "SCHEMA" to schema; Confluent would not). Unknown fields are ignored:
// newer clients send fields (metadata, ruleSet...) this registry does not
// use.
func decode(req *http.Request, v any) error {
	data, err := io.ReadAll(req.Body)
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errorf(CodeUnprocessable, "request body is larger than %d bytes", mbe.Limit)
		}
		return errorf(CodeUnprocessable, "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return errorf(CodeUnprocessable, "request body is empty")
	}
	if err := schema.StrictJSON(data, bodyLimits, true); err != nil {
		return errorf(CodeUnprocessable, "request body refused: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return errorf(CodeUnprocessable, "request body is not valid JSON: %v", err)
	}
	if dec.More() {
		return errorf(CodeUnprocessable, "request body has data after its JSON value")
	}
	var tree any
	if err := json.Unmarshal(data, &tree); err == nil {
		if key, field, ok := miscasedKey(tree, jsonFields(reflect.TypeOf(v))); ok {
			return errorf(CodeUnprocessable, "request body refused: key %q is spelled %q", key, field)
		}
	}
	return nil
}

// jsonFields lists the JSON names of the struct fields reachable from t.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		for f := range t.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if name != "-" && !out[name] {
				out[name] = true
				walk(f.Type)
			}
		}
	}
	walk(t)
	return out
}

// miscasedKey finds an object key that matches a field name only when
// case is ignored.
func miscasedKey(v any, fields map[string]bool) (key, field string, found bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if !fields[k] {
				for f := range fields {
					if strings.EqualFold(k, f) {
						return k, f, true
					}
				}
			}
			if key, field, found = miscasedKey(x, fields); found {
				return
			}
		}
	case []any:
		for _, x := range v {
			if key, field, found = miscasedKey(x, fields); found {
				return
			}
		}
	}
	return "", "", false
}

func flag(req *http.Request, name string) bool {
	v, err := strconv.ParseBool(req.URL.Query().Get(name))
	return err == nil && v
}

// Wire shapes. schemaType is omitted for AVRO, as Confluent does: clients
// read a missing type as AVRO.

type schemaAnswer struct {
	Schema     string             `json:"schema"`
	SchemaType string             `json:"schemaType,omitempty"`
	References []schema.Reference `json:"references,omitempty"`
}

type versionAnswer struct {
	Subject    string             `json:"subject"`
	Version    int                `json:"version"`
	ID         int                `json:"id"`
	SchemaType string             `json:"schemaType,omitempty"`
	Schema     string             `json:"schema"`
	References []schema.Reference `json:"references,omitempty"`
}

func wireType(t string) string {
	if t == string(schema.TypeAvro) {
		return ""
	}
	return t
}

func answerVersion(v *Version) versionAnswer {
	return versionAnswer{Subject: v.Subject, Version: v.Version, ID: v.ID, SchemaType: wireType(v.SchemaType), Schema: v.Schema, References: v.References}
}

func pathID(req *http.Request) (int, error) {
	s := req.PathValue("id")
	id, err := strconv.Atoi(s)
	if err != nil || id < 1 {
		return 0, errorf(CodeSchemaNotFound, "Schema %s not found", s)
	}
	return id, nil
}

func (r *Registry) getTypes(req *http.Request) (any, error) {
	return r.formats.Types(), nil
}

func (r *Registry) getSchemaByID(req *http.Request) (any, error) {
	id, err := pathID(req)
	if err != nil {
		return nil, err
	}
	// ?subject= names a Confluent context; with one context it changes
	// nothing.
	e, err := r.SchemaByID(req.Context(), id)
	if err != nil {
		return nil, err
	}
	return schemaAnswer{Schema: e.Schema, SchemaType: wireType(e.SchemaType), References: e.References}, nil
}

func (r *Registry) getRawSchemaByID(req *http.Request) (any, error) {
	id, err := pathID(req)
	if err != nil {
		return nil, err
	}
	e, err := r.SchemaByID(req.Context(), id)
	if err != nil {
		return nil, err
	}
	return raw(e.Schema), nil
}

func (r *Registry) getVersionsByID(req *http.Request) (any, error) {
	id, err := pathID(req)
	if err != nil {
		return nil, err
	}
	return r.subjectVersionsByID(id, flag(req, "deleted"))
}

func (r *Registry) getSubjectsByID(req *http.Request) (any, error) {
	id, err := pathID(req)
	if err != nil {
		return nil, err
	}
	svs, err := r.subjectVersionsByID(id, flag(req, "deleted"))
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, sv := range svs {
		if len(out) == 0 || out[len(out)-1] != sv.Subject {
			out = append(out, sv.Subject)
		}
	}
	return out, nil
}

func (r *Registry) getSubjects(req *http.Request) (any, error) {
	prefix := req.URL.Query().Get("subjectPrefix")
	if prefix == ":*:" { // Confluent's "every context"
		prefix = ""
	}
	return r.Subjects(req.Context(), prefix, flag(req, "deleted")), nil
}

func (r *Registry) getVersions(req *http.Request) (any, error) {
	return r.Versions(req.Context(), req.PathValue("subject"), flag(req, "deleted"))
}

func (r *Registry) postVersion(req *http.Request) (any, error) {
	var body SchemaRequest
	if err := decode(req, &body); err != nil {
		return nil, err
	}
	id, err := r.Register(req.Context(), req.PathValue("subject"), body, flag(req, "normalize"))
	if err != nil {
		return nil, err
	}
	return struct {
		ID int `json:"id"`
	}{id}, nil
}

func (r *Registry) getVersion(req *http.Request) (any, error) {
	v, err := r.Version(req.Context(), req.PathValue("subject"), req.PathValue("version"), flag(req, "deleted"))
	if err != nil {
		return nil, err
	}
	return answerVersion(v), nil
}

func (r *Registry) getRawVersion(req *http.Request) (any, error) {
	v, err := r.Version(req.Context(), req.PathValue("subject"), req.PathValue("version"), flag(req, "deleted"))
	if err != nil {
		return nil, err
	}
	return raw(v.Schema), nil
}

func (r *Registry) getReferencedBy(req *http.Request) (any, error) {
	return r.ReferencedBy(req.Context(), req.PathValue("subject"), req.PathValue("version"))
}

func (r *Registry) postLookup(req *http.Request) (any, error) {
	var body SchemaRequest
	if err := decode(req, &body); err != nil {
		return nil, err
	}
	v, err := r.Lookup(req.Context(), req.PathValue("subject"), body, flag(req, "deleted"))
	if err != nil {
		return nil, err
	}
	return answerVersion(v), nil
}

func (r *Registry) deleteSubject(req *http.Request) (any, error) {
	return r.DeleteSubject(req.Context(), req.PathValue("subject"), flag(req, "permanent"))
}

func (r *Registry) deleteVersion(req *http.Request) (any, error) {
	return r.DeleteVersion(req.Context(), req.PathValue("subject"), req.PathValue("version"), flag(req, "permanent"))
}

type configAnswer struct {
	CompatibilityLevel schema.Mode `json:"compatibilityLevel"`
}

func (r *Registry) getConfig(req *http.Request) (any, error) {
	subject := req.PathValue("subject")
	if subject == "" {
		m, err := r.Compatibility(req.Context(), "")
		return configAnswer{m}, err
	}
	m, err := r.SubjectCompatibility(req.Context(), subject)
	if errors.Is(err, ErrSubjectCompatNotConfigured) && flag(req, "defaultToGlobal") {
		m, err = r.Compatibility(req.Context(), "")
	}
	if err != nil {
		return nil, err
	}
	return configAnswer{m}, nil
}

func (r *Registry) putConfig(req *http.Request) (any, error) {
	var body struct {
		Compatibility string `json:"compatibility"`
	}
	if err := decode(req, &body); err != nil {
		return nil, err
	}
	m, err := ParseCompatibility(body.Compatibility)
	if err != nil {
		return nil, err
	}
	if err := r.SetCompatibility(req.Context(), req.PathValue("subject"), m); err != nil {
		return nil, err
	}
	return struct {
		Compatibility schema.Mode `json:"compatibility"`
	}{m}, nil
}

// deleteConfig answers with the level that was in force before.
func (r *Registry) deleteConfig(req *http.Request) (any, error) {
	subject := req.PathValue("subject")
	var was schema.Mode
	var err error
	if subject == "" {
		was, err = r.Compatibility(req.Context(), "")
	} else {
		was, err = r.SubjectCompatibility(req.Context(), subject)
		if errors.Is(err, ErrSubjectCompatNotConfigured) {
			err = subjectNotFound(subject)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := r.DeleteCompatibility(req.Context(), subject); err != nil {
		return nil, err
	}
	return configAnswer{was}, nil
}

func (r *Registry) postCompatibility(req *http.Request) (any, error) {
	var body SchemaRequest
	if err := decode(req, &body); err != nil {
		return nil, err
	}
	ok, reasons, err := r.Check(req.Context(), req.PathValue("subject"), req.PathValue("version"), body)
	if err != nil {
		return nil, err
	}
	if !flag(req, "verbose") {
		return struct {
			IsCompatible bool `json:"is_compatible"`
		}{ok}, nil
	}
	messages := make([]string, len(reasons))
	for i, reason := range reasons {
		messages[i] = reason.String()
	}
	return struct {
		IsCompatible bool     `json:"is_compatible"`
		Messages     []string `json:"messages"`
	}{ok, messages}, nil
}

// getMode answers READWRITE: this registry has no import or read-only
// modes.
func (r *Registry) getMode(req *http.Request) (any, error) {
	return map[string]string{"mode": "READWRITE"}, nil
}
