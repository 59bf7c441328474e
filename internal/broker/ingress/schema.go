package ingress

import (
	"encoding/binary"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/semaq"
)

// confluentMagic starts Confluent's wire format: magic byte 0, then the
// schema id as a 4-byte big-endian integer, then the encoded payload.
const confluentMagic = 0

// checkSchema enforces schema-on-write for one message whose subject is
// bound (b) to a registry subject: the payload must match a live version of it.
// The schema comes from the Confluent wire-format prefix, else from the
// AI-Schema-Id header, else (JSON Schema only) the latest version. On success
// the message carries the schema id in AI-Schema-Id. Reads only the
// registry's in-memory snapshot: no I/O on this path.
func checkSchema(reg *registry.Registry, b registry.Binding, m *nats.Msg, hdrID int64) *semaq.APIError {
	var (
		ok    bool
		entry *registry.Entry
		body  = m.Data
		id    int
	)
	framed := len(m.Data) >= 5 && m.Data[0] == confluentMagic
	switch {
	case framed:
		id = int(binary.BigEndian.Uint32(m.Data[1:5]))
		body = m.Data[5:]
		if hdrID > 0 && int64(id) != hdrID {
			return semaq.NewAPIError(semaq.ErrSchema, "payload on %s is framed with schema id %d but AI-Schema-Id says %d", m.Subject, id, hdrID)
		}
	case hdrID > 0:
		id = int(hdrID)
	}
	if id > 0 {
		if !reg.SubjectHasID(b.Subject, id) {
			return semaq.NewAPIError(semaq.ErrSchema, "schema id %d is not a version of registry subject %s, which %s is bound to", id, b.Subject, m.Subject)
		}
		if entry, ok = reg.Cached(id); !ok {
			return semaq.NewAPIError(semaq.ErrSchemaNotFound, "schema id %d is not loaded yet; retry", id)
		}
	} else {
		if entry, _, ok = reg.Latest(b.Subject); !ok {
			return semaq.NewAPIError(semaq.ErrSchemaNotFound, "registry subject %s, which %s is bound to, has no live schema", b.Subject, m.Subject)
		}
		if t := schema.Type(entry.SchemaType); t != "" && t != schema.TypeJSON {
			return semaq.NewAPIError(semaq.ErrSchema, "%s payloads on %s need a schema id: Confluent wire format (magic byte 0 + 4-byte id) or the AI-Schema-Id header", t, m.Subject)
		}
		id = entry.ID
	}
	if entry.Compiled == nil {
		if entry.Err != nil {
			// Refused when loaded (over the schema limits): the publish is
			// refused rather than stored unvalidated.
			return semaq.NewAPIError(semaq.ErrSchema, "schema id %d (%s) cannot validate payloads on this node: %v; publishes needing it are refused until a compliant version is registered", id, entry.SchemaType, entry.Err)
		}
		return semaq.NewAPIError(semaq.ErrSchemaNotFound, "schema id %d (%s) cannot validate payloads on this node: its format is not available", id, entry.SchemaType)
	}
	if err := entry.Compiled.Validate(body); err != nil {
		return semaq.NewAPIError(semaq.ErrSchema, "payload on %s does not match schema id %d (registry subject %s): %v", m.Subject, id, b.Subject, err)
	}
	m.Header[semaq.HdrSchemaID] = []string{strconv.Itoa(id)}
	return nil
}
