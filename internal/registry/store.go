package registry

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"unicode/utf8"

	"github.com/semaq/semaq/internal/schema"
)

// KV layout. Every value is JSON. Subjects and patterns may hold any
// character, so they appear in keys base64url-encoded without padding,
// which uses only characters KV keys allow and never a '.'.
//
//	seq.id                  {"last":N}            last schema id handed out (CAS counter)
//	ids.<id>                schemaRecord          a schema by global id
//	canon.<sha256 hex>      {"id":N}              identity of a schema -> its id (Create-once)
//	subj.<b64 subject>.<v>  versionRecord         version v of a subject
//	cfg.global              {"compatibilityLevel"} global compatibility
//	cfg.s.<b64 subject>     {"compatibilityLevel"} a subject's compatibility
//	bind.<b64 pattern>      {"pattern","subject"} schema-on-write binding
const (
	keySeq          = "seq.id"
	keyGlobalConfig = "cfg.global"
	prefixSchema    = "ids."
	prefixCanon     = "canon."
	prefixVersion   = "subj."
	prefixConfig    = "cfg.s."
	prefixBinding   = "bind."
)

type seqRecord struct {
	Last int `json:"last"`
}

// schemaRecord is a schema by id. Hash is its identity (see identity),
// stored so loading needs no parsing to deduplicate.
type schemaRecord struct {
	ID         int                `json:"id"`
	SchemaType string             `json:"schemaType"`
	Schema     string             `json:"schema"`
	References []schema.Reference `json:"references,omitempty"`
	Hash       string             `json:"hash"`
}

type canonRecord struct {
	ID int `json:"id"`
}

type versionRecord struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      int    `json:"id"`
	Deleted bool   `json:"deleted,omitempty"`
}

type configRecord struct {
	Compatibility schema.Mode `json:"compatibilityLevel"`
}

var b64 = base64.RawURLEncoding

func encodeName(s string) string { return b64.EncodeToString([]byte(s)) }

func decodeName(s string) (string, error) {
	b, err := b64.DecodeString(s)
	return string(b), err
}

func keySchema(id int) string     { return prefixSchema + strconv.Itoa(id) }
func keyCanon(hash string) string { return prefixCanon + hash }
func keyVersion(subject string, v int) string {
	return prefixVersion + encodeName(subject) + "." + strconv.Itoa(v)
}
func keyConfig(subject string) string {
	if subject == "" {
		return keyGlobalConfig
	}
	return prefixConfig + encodeName(subject)
}
func keyBinding(pattern string) string { return prefixBinding + encodeName(pattern) }

// identity is the registry's notion of "the same schema": type, references
// and canonical text. Two registrations with one identity share an id.
func identity(typ schema.Type, refs []schema.Reference, canonical string) string {
	h := sha256.New()
	h.Write([]byte(typ))
	h.Write([]byte{0})
	for _, r := range refs {
		h.Write([]byte(r.Name))
		h.Write([]byte{0})
		h.Write([]byte(r.Subject))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(r.Version)))
		h.Write([]byte{0})
	}
	h.Write([]byte{1})
	h.Write([]byte(canonical))
	return hex.EncodeToString(h.Sum(nil))
}

// checkSubject accepts what Confluent accepts as a subject, less what
// could mislead a person reading it: non-empty valid UTF-8 without control
// characters (C0, DEL, C1), bidirectional controls (U+202E makes
// "user-fdp.json" display as "user-nosj.pdf"), line separators or
// invisible spaces. The length bound keeps a KV key (the subject
// base64-encoded) well inside a NATS control line.
func checkSubject(subject string) error {
	if subject == "" {
		return errorf(CodeInvalidSubject, "The specified subject is not valid: it is empty")
	}
	if len(subject) > 1024 {
		return errorf(CodeInvalidSubject, "The specified subject is not valid: it is longer than 1024 bytes")
	}
	if !utf8.ValidString(subject) {
		return errorf(CodeInvalidSubject, "The specified subject %q is not valid: it is not valid UTF-8", subject)
	}
	for i, r := range subject {
		if what := badSubjectRune(r); what != "" {
			return errorf(CodeInvalidSubject, "The specified subject %q is not valid: it has %s (U+%04X) at byte %d", subject, what, r, i)
		}
	}
	return nil
}

func badSubjectRune(r rune) string {
	switch {
	case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
		return "a control character"
	case r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
		return "a bidirectional control character"
	case r == 0x2028 || r == 0x2029:
		return "a line separator"
	case r == 0x200b || r == 0xfeff || r == utf8.RuneError:
		return "an invisible or replacement character"
	}
	return ""
}
