package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/semaq/semaq/internal/schema"
)

// Error codes, as Confluent Schema Registry numbers them. The HTTP status of
// a code is its first three digits. The 4049x and 4229x codes are SemaQ's
// own (schema-on-write bindings); Confluent does not use them.
const (
	CodeSubjectNotFound            = 40401
	CodeVersionNotFound            = 40402
	CodeSchemaNotFound             = 40403
	CodeSubjectSoftDeleted         = 40404
	CodeSubjectNotSoftDeleted      = 40405
	CodeVersionSoftDeleted         = 40406
	CodeVersionNotSoftDeleted      = 40407
	CodeSubjectCompatNotConfigured = 40408
	CodeBindingNotFound            = 40491
	CodeIncompatible               = 409
	CodeUnsupportedMediaType       = 415
	CodeUnprocessable              = 422
	CodeInvalidSchema              = 42201
	CodeInvalidVersion             = 42202
	CodeInvalidCompatibility       = 42203
	CodeReferenceExists            = 42206
	CodeInvalidSubject             = 42208
	CodeInvalidBinding             = 42291
	CodeLimitExceeded              = 42292
	CodeStore                      = 50001
	CodeTimeout                    = 50002
)

// Error is a registry error with Confluent's error code. Its JSON form is
// Confluent's error body.
type Error struct {
	Code    int    `json:"error_code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("registry: %s (error %d)", e.Message, e.Code) }

// Is matches any *Error with the same code, so errors.Is(err, ErrSubjectNotFound)
// holds whatever the message says.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e != nil && t != nil && e.Code == t.Code
}

// Status is the HTTP status of the error: the code's first three digits.
func (e *Error) Status() int {
	c := e.Code
	for c >= 1000 {
		c /= 10
	}
	return c
}

// Sentinels for errors.Is; each matches every *Error with its code.
var (
	ErrSubjectNotFound            = &Error{Code: CodeSubjectNotFound, Message: "subject not found"}
	ErrVersionNotFound            = &Error{Code: CodeVersionNotFound, Message: "version not found"}
	ErrSchemaNotFound             = &Error{Code: CodeSchemaNotFound, Message: "schema not found"}
	ErrSubjectSoftDeleted         = &Error{Code: CodeSubjectSoftDeleted, Message: "subject was soft deleted"}
	ErrSubjectNotSoftDeleted      = &Error{Code: CodeSubjectNotSoftDeleted, Message: "subject was not soft deleted first"}
	ErrVersionSoftDeleted         = &Error{Code: CodeVersionSoftDeleted, Message: "version was soft deleted"}
	ErrVersionNotSoftDeleted      = &Error{Code: CodeVersionNotSoftDeleted, Message: "version was not soft deleted first"}
	ErrSubjectCompatNotConfigured = &Error{Code: CodeSubjectCompatNotConfigured, Message: "subject has no compatibility level of its own"}
	// ErrBindingNotFound: no binding has the pattern (SemaQ extension).
	ErrBindingNotFound = &Error{Code: CodeBindingNotFound, Message: "binding not found"}
	// ErrIncompatible: the schema breaks the subject's compatibility mode.
	ErrIncompatible = &Error{Code: CodeIncompatible, Message: "schema is incompatible"}
	// ErrUnprocessable: the request body is not what the endpoint takes.
	ErrUnprocessable = &Error{Code: CodeUnprocessable, Message: "unprocessable request"}
	// ErrInvalidSchema: the schema does not parse, names an unknown type or
	// references a subject version that does not exist.
	ErrInvalidSchema        = &Error{Code: CodeInvalidSchema, Message: "invalid schema"}
	ErrInvalidVersion       = &Error{Code: CodeInvalidVersion, Message: "invalid version"}
	ErrInvalidCompatibility = &Error{Code: CodeInvalidCompatibility, Message: "invalid compatibility level"}
	// ErrReferenceExists: a live schema references the version being deleted.
	ErrReferenceExists = &Error{Code: CodeReferenceExists, Message: "a schema references it"}
	ErrInvalidSubject  = &Error{Code: CodeInvalidSubject, Message: "invalid subject"}
	// ErrInvalidBinding: the binding pattern is not a NATS subject pattern
	// (SemaQ extension).
	ErrInvalidBinding = &Error{Code: CodeInvalidBinding, Message: "invalid binding pattern"}
	// ErrLimitExceeded: the registration would pass one of the registry's
	// count or size bounds (subjects, versions per subject, schemas, total
	// bytes; SemaQ extension). A schema over its own limits is
	// ErrInvalidSchema.
	ErrLimitExceeded = &Error{Code: CodeLimitExceeded, Message: "registry limit exceeded"}
	// ErrStore: JetStream failed or the registry is closed.
	ErrStore   = &Error{Code: CodeStore, Message: "store error"}
	ErrTimeout = &Error{Code: CodeTimeout, Message: "operation timed out"}
)

func errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func subjectNotFound(subject string) *Error {
	return errorf(CodeSubjectNotFound, "Subject '%s' not found.", subject)
}

func versionNotFound(v int) *Error {
	return errorf(CodeVersionNotFound, "Version %d not found.", v)
}

func schemaNotFound(id int) *Error {
	return errorf(CodeSchemaNotFound, "Schema %d not found", id)
}

func incompatible(subject string, reasons []schema.Incompatibility) *Error {
	msgs := make([]string, len(reasons))
	for i, r := range reasons {
		msgs[i] = r.String()
	}
	return errorf(CodeIncompatible, "Schema being registered is incompatible with an earlier schema for subject %q, details: [%s]",
		subject, strings.Join(msgs, "; "))
}

// storeErr turns a JetStream or context failure into a coded error: a
// deadline is 50002, everything else 50001. Coded errors pass unchanged.
func storeErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errorf(CodeTimeout, "%s: %v", op, err)
	}
	return errorf(CodeStore, "%s: %v", op, err)
}
