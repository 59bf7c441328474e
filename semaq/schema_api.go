package semaq

import (
	"fmt"
	"strconv"
	"strings"
)

// Subjects of the schema registry's NATS API. Every request is a JSON body
// (an empty body is an empty object); replies are JSON, or an error reply.
// The same registry also answers Confluent's REST API over HTTP; this API is
// for the SemaQ CLI and SDK, and speaks SemaQ's field names.
const (
	APISchemaRegister  = "$SQ.API.SCHEMA.REGISTER"   // SchemaRegisterRequest -> SchemaRegisterResponse
	APISchemaGet       = "$SQ.API.SCHEMA.GET"        // SchemaGetRequest -> Schema
	APISchemaSubjects  = "$SQ.API.SCHEMA.SUBJECTS"   // SchemaSubjectsRequest -> SchemaSubjectsResponse
	APISchemaVersions  = "$SQ.API.SCHEMA.VERSIONS"   // SchemaVersionsRequest -> SchemaVersionsResponse
	APISchemaCheck     = "$SQ.API.SCHEMA.CHECK"      // SchemaCheckRequest -> SchemaCheckResponse
	APISchemaConfigGet = "$SQ.API.SCHEMA.CONFIG.GET" // SchemaConfigRequest -> SchemaConfig
	APISchemaConfigSet = "$SQ.API.SCHEMA.CONFIG.SET" // SchemaConfig -> SchemaConfig
	APISchemaDelete    = "$SQ.API.SCHEMA.DELETE"     // SchemaDeleteRequest -> SchemaDeleteResponse
	APISchemaBind      = "$SQ.API.SCHEMA.BIND"       // SchemaBinding -> SchemaBinding
	APISchemaUnbind    = "$SQ.API.SCHEMA.UNBIND"     // SchemaBinding (pattern only) -> {"success":true}
	APISchemaBindings  = "$SQ.API.SCHEMA.BINDINGS"   // {} -> SchemaBindingsResponse
	APISchemaLookup    = "$SQ.API.SCHEMA.LOOKUP"     // SchemaLookupRequest -> SchemaLookup
)

// Schema types, as Confluent's API spells them. The SemaQ API takes any
// case and defaults to JSON; Confluent's REST API defaults to AVRO.
const (
	SchemaTypeJSON     = "JSON"
	SchemaTypeAvro     = "AVRO"
	SchemaTypeProtobuf = "PROTOBUF"
)

// SchemaTypes lists the schema types, in the order help texts show them.
var SchemaTypes = []string{SchemaTypeJSON, SchemaTypeAvro, SchemaTypeProtobuf}

// SchemaCompatibilities lists the compatibility modes, with Confluent's
// meaning; BACKWARD is the default of a registry nobody configured.
var SchemaCompatibilities = []string{
	"BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE",
}

// ParseSchemaType returns the canonical spelling of a schema type (any
// case); "" is JSON.
func ParseSchemaType(s string) (string, error) {
	if s == "" {
		return SchemaTypeJSON, nil
	}
	u := strings.ToUpper(s)
	for _, t := range SchemaTypes {
		if u == t {
			return t, nil
		}
	}
	return "", fmt.Errorf("schema type %q is not one of %s", s, strings.Join(SchemaTypes, ", "))
}

// ParseSchemaCompatibility returns the canonical spelling of a
// compatibility mode (any case).
func ParseSchemaCompatibility(s string) (string, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for _, m := range SchemaCompatibilities {
		if u == m {
			return m, nil
		}
	}
	return "", fmt.Errorf("compatibility %q is not one of %s", s, strings.Join(SchemaCompatibilities, ", "))
}

// CheckSchemaVersion accepts a version as the API takes it: "latest" (any
// case) or a number from 1 to 2^31-1.
func CheckSchemaVersion(v string) error {
	if strings.EqualFold(v, "latest") {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 {
		return fmt.Errorf("version %q is not \"latest\" or a number from 1 to 2147483647", v)
	}
	return nil
}

// SchemaReference names a schema registered under another subject that a
// schema uses: a Protobuf import (Name is the import path), a JSON Schema
// $ref (the URI it uses) or an Avro named type (the full name). Version -1
// means the subject's latest version when registering.
type SchemaReference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Schema is a registered schema. ID, Type and Text never change for an id;
// Subject, Version and Deleted are set when it was read as a subject version.
type Schema struct {
	ID         int               `json:"id"`
	Type       string            `json:"schema_type"`
	Text       string            `json:"schema"`
	References []SchemaReference `json:"references,omitempty"`
	Subject    string            `json:"subject,omitempty"`
	Version    int               `json:"version,omitempty"`
	// Deleted marks a soft-deleted version (only returned when asked for).
	Deleted bool `json:"deleted,omitempty"`
}

// SchemaRegisterRequest adds a schema to a registry subject. The same
// schema (same type, references and canonical text) gets the same id under
// every subject; registering a live version's schema again returns it.
type SchemaRegisterRequest struct {
	Subject    string            `json:"subject"`
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schema_type,omitempty"` // JSON (default), AVRO, PROTOBUF
	References []SchemaReference `json:"references,omitempty"`
	// Normalize stores the schema's canonical text instead of the text sent.
	Normalize bool `json:"normalize,omitempty"`
}

// SchemaRegisterResponse is the id of the registered schema and the
// subject version that holds it.
type SchemaRegisterResponse struct {
	ID      int `json:"id"`
	Version int `json:"version"`
}

// SchemaGetRequest reads a schema by global id, or a version of a subject
// (Version "latest", the default, or a number). Give ID or Subject, not both.
type SchemaGetRequest struct {
	ID      int    `json:"id,omitempty"`
	Subject string `json:"subject,omitempty"`
	Version string `json:"version,omitempty"`
	// Deleted makes soft-deleted versions visible.
	Deleted bool `json:"deleted,omitempty"`
}

// SchemaSubjectsRequest lists the registry's subjects.
type SchemaSubjectsRequest struct {
	// Deleted includes subjects whose versions are all soft-deleted.
	Deleted bool `json:"deleted,omitempty"`
}

// SchemaSubjectsResponse lists subjects, sorted.
type SchemaSubjectsResponse struct {
	Subjects []string `json:"subjects"`
}

// SchemaVersionsRequest lists the versions of a subject.
type SchemaVersionsRequest struct {
	Subject string `json:"subject"`
	Deleted bool   `json:"deleted,omitempty"`
}

// SchemaVersionsResponse lists version numbers, ascending.
type SchemaVersionsResponse struct {
	Subject  string `json:"subject"`
	Versions []int  `json:"versions"`
}

// SchemaCheckRequest tests a schema against a subject without registering
// it. Version "" checks it as a registration would (against the versions
// the subject's mode looks at; a subject without versions accepts
// anything); "latest" or a number checks it against that version alone.
type SchemaCheckRequest struct {
	Subject    string            `json:"subject"`
	Version    string            `json:"version,omitempty"`
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schema_type,omitempty"`
	References []SchemaReference `json:"references,omitempty"`
}

// SchemaIncompatibility is one reason a schema breaks compatibility.
type SchemaIncompatibility struct {
	// Path locates the change: a JSON pointer, an Avro field path, a
	// Protobuf element.
	Path string `json:"path"`
	// Rule names the change in Confluent's vocabulary (TYPE_CHANGED...).
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

func (i SchemaIncompatibility) String() string {
	return fmt.Sprintf("%s at %s: %s", i.Rule, i.Path, i.Message)
}

// SchemaCheckResponse is the verdict of a check; Reasons is empty when
// Compatible.
type SchemaCheckResponse struct {
	Compatible bool                    `json:"compatible"`
	Reasons    []SchemaIncompatibility `json:"reasons"`
}

// SchemaConfigRequest reads the compatibility of a subject, or the global
// one when Subject is "".
type SchemaConfigRequest struct {
	Subject string `json:"subject,omitempty"`
}

// SchemaConfig is a compatibility setting. In a reply, Compatibility is the
// mode that applies, and Inherited says a subject has no setting of its own
// (the global mode, or BACKWARD, applies).
type SchemaConfig struct {
	Subject       string `json:"subject,omitempty"`
	Compatibility string `json:"compatibility"`
	Inherited     bool   `json:"inherited,omitempty"`
}

// SchemaDeleteRequest deletes one version of a subject ("latest" or a
// number), or every version when Version is "". A soft delete hides the
// versions (their ids stay readable); Permanent removes versions that were
// soft-deleted first.
type SchemaDeleteRequest struct {
	Subject   string `json:"subject"`
	Version   string `json:"version,omitempty"`
	Permanent bool   `json:"permanent,omitempty"`
}

// SchemaDeleteResponse lists the versions deleted, ascending.
type SchemaDeleteResponse struct {
	Subject  string `json:"subject"`
	Versions []int  `json:"versions"`
}

// SchemaBinding ties a NATS subject pattern to a registry subject: the
// ingress validates messages published on matching subjects against it.
type SchemaBinding struct {
	Pattern string `json:"pattern"`
	Subject string `json:"subject,omitempty"`
}

// SchemaBindingsResponse lists bindings, sorted by pattern.
type SchemaBindingsResponse struct {
	Bindings []SchemaBinding `json:"bindings"`
}

// SchemaLookupRequest asks which schema applies to a NATS subject.
type SchemaLookupRequest struct {
	Subject string `json:"subject"`
}

// SchemaLookup is the schema a NATS subject is bound to now: the most
// specific binding that matches it and its registry subject's latest live
// version. A client learns the current schema id here, and reads the
// schema itself by id (ids never change).
type SchemaLookup struct {
	Binding    SchemaBinding `json:"binding"`
	ID         int           `json:"id"`
	Version    int           `json:"version"`
	SchemaType string        `json:"schema_type"`
}

// Sentinels of the registry errors, for errors.Is. Their codes are
// Confluent Schema Registry's (errcodes.go).
var (
	ErrSchemaSubjectNotFound       = &APIError{Code: 404, ErrCode: ErrCodeSchemaSubjectNotFound, Description: "schema subject not found"}
	ErrSchemaVersionNotFound       = &APIError{Code: 404, ErrCode: ErrCodeSchemaVersionNotFound, Description: "schema version not found"}
	ErrSchemaIDNotFound            = &APIError{Code: 404, ErrCode: ErrCodeSchemaIDNotFound, Description: "schema id not found"}
	ErrSchemaSubjectSoftDeleted    = &APIError{Code: 404, ErrCode: ErrCodeSchemaSubjectSoftDeleted, Description: "schema subject was soft deleted"}
	ErrSchemaSubjectNotSoftDeleted = &APIError{Code: 404, ErrCode: ErrCodeSchemaSubjectNotSoftDeleted, Description: "schema subject was not soft deleted first"}
	ErrSchemaVersionSoftDeleted    = &APIError{Code: 404, ErrCode: ErrCodeSchemaVersionSoftDeleted, Description: "schema version was soft deleted"}
	ErrSchemaVersionNotSoftDeleted = &APIError{Code: 404, ErrCode: ErrCodeSchemaVersionNotSoftDeleted, Description: "schema version was not soft deleted first"}
	// ErrSchemaCompatNotConfigured: the subject has no compatibility of its
	// own (Confluent's REST API; the NATS API reports the inherited mode).
	ErrSchemaCompatNotConfigured = &APIError{Code: 404, ErrCode: ErrCodeSchemaCompatNotConfigured, Description: "schema subject has no compatibility of its own"}
	// ErrSchemaBindingNotFound: no binding has the pattern (unbind), or none
	// matches the NATS subject (lookup).
	ErrSchemaBindingNotFound = &APIError{Code: 404, ErrCode: ErrCodeSchemaBindingNotFound, Description: "schema binding not found"}
	// ErrSchemaIncompatible: the schema breaks the subject's compatibility
	// mode; the description lists the reasons.
	ErrSchemaIncompatible  = &APIError{Code: 409, ErrCode: ErrCodeSchemaIncompatible, Description: "schema is incompatible"}
	ErrSchemaUnprocessable = &APIError{Code: 422, ErrCode: ErrCodeSchemaUnprocessable, Description: "unprocessable schema request"}
	// ErrSchemaInvalid: the schema does not parse, has an unknown type, or
	// references a subject version that does not exist.
	ErrSchemaInvalid              = &APIError{Code: 422, ErrCode: ErrCodeSchemaInvalid, Description: "invalid schema"}
	ErrSchemaInvalidVersion       = &APIError{Code: 422, ErrCode: ErrCodeSchemaInvalidVersion, Description: "invalid schema version"}
	ErrSchemaInvalidCompatibility = &APIError{Code: 422, ErrCode: ErrCodeSchemaInvalidCompatibility, Description: "invalid compatibility level"}
	// ErrSchemaReferenceExists: a live schema references the version being
	// deleted.
	ErrSchemaReferenceExists = &APIError{Code: 422, ErrCode: ErrCodeSchemaReferenceExists, Description: "a schema references it"}
	ErrSchemaInvalidSubject  = &APIError{Code: 422, ErrCode: ErrCodeSchemaInvalidSubject, Description: "invalid schema subject"}
	ErrSchemaInvalidBinding  = &APIError{Code: 422, ErrCode: ErrCodeSchemaInvalidBinding, Description: "invalid binding pattern"}
	// ErrSchemaLimitExceeded: a registration would pass one of the
	// registry's bounds (subjects, versions of a subject, schemas, total
	// bytes). A schema over its own limits is ErrSchemaInvalid.
	ErrSchemaLimitExceeded = &APIError{Code: 422, ErrCode: ErrCodeSchemaLimitExceeded, Description: "schema registry limit exceeded"}
	// ErrSchemaStore: the registry's storage failed or timed out.
	ErrSchemaStore   = &APIError{Code: 500, ErrCode: ErrCodeSchemaStore, Description: "schema registry storage error"}
	ErrSchemaTimeout = &APIError{Code: 500, ErrCode: ErrCodeSchemaTimeout, Description: "schema registry timed out"}
)
