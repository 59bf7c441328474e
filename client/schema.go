package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// Schema registry. The broker's registry is reached over NATS
// ($SQ.API.SCHEMA.*); errors are *semaq.APIError values carrying
// Confluent's error codes (semaq.ErrSchemaSubjectNotFound,
// semaq.ErrSchemaIncompatible, ...).
//
// Runtime negotiation: a producer asks which schema a subject is bound to
// now (SchemaFor), and tags each message with its id, in the AI-Schema-Id
// header (WithSchemaID, for JSON payloads) or in Confluent's wire frame
// (ConfluentFrame, for Avro and Protobuf). A consumer reads the id off each
// message and fetches the schema by id (Schema): ids never change, so the
// client keeps every schema it has fetched and asks the broker once per id.

// SchemaOption adjusts a schema sent to the registry. Options validate their
// arguments; the call returns the first error before sending anything.
type SchemaOption func(*schemaOptions) error

type schemaOptions struct {
	typ       string
	refs      []semaq.SchemaReference
	normalize bool
}

// WithSchemaType sets the schema's type: JSON (the default), AVRO or
// PROTOBUF, any case.
func WithSchemaType(typ string) SchemaOption {
	return func(o *schemaOptions) error {
		t, err := semaq.ParseSchemaType(typ)
		if err != nil {
			return fmt.Errorf("client: WithSchemaType: %w", err)
		}
		o.typ = t
		return nil
	}
}

// WithSchemaReferences adds references to schemas registered under other
// subjects (Protobuf imports, JSON Schema $refs, Avro named types). A
// reference's Version -1 means that subject's latest version.
func WithSchemaReferences(refs ...semaq.SchemaReference) SchemaOption {
	return func(o *schemaOptions) error {
		for _, r := range refs {
			switch {
			case r.Name == "":
				return errors.New("client: WithSchemaReferences: a reference has no name")
			case r.Subject == "":
				return fmt.Errorf("client: WithSchemaReferences: reference %q has no subject", r.Name)
			case r.Version != -1 && r.Version < 1:
				return fmt.Errorf("client: WithSchemaReferences: reference %q: version %d is not -1 (latest) or a number from 1", r.Name, r.Version)
			}
		}
		o.refs = append(o.refs, refs...)
		return nil
	}
}

// WithSchemaNormalize makes RegisterSchema store the schema's canonical
// text instead of the text given. It does not change the schema's id.
func WithSchemaNormalize() SchemaOption {
	return func(o *schemaOptions) error {
		o.normalize = true
		return nil
	}
}

func applySchemaOptions(opts []SchemaOption) (schemaOptions, error) {
	o := schemaOptions{typ: semaq.SchemaTypeJSON}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	return o, nil
}

// checkVersion refuses a version the registry would refuse, with its code.
func checkVersion(v string) error {
	if err := semaq.CheckSchemaVersion(v); err != nil {
		return semaq.NewAPIError(semaq.ErrSchemaInvalidVersion, "%v", err)
	}
	return nil
}

// RegisterSchema adds a schema to a registry subject and returns its global
// id and the subject version holding it. The same schema has the same id
// under every subject; registering a live version's schema again returns
// that version. A schema that breaks the subject's compatibility mode fails
// with semaq.ErrSchemaIncompatible, whose description lists the reasons; one
// that does not parse fails with semaq.ErrSchemaInvalid.
func (c *Client) RegisterSchema(ctx context.Context, subject, text string, opts ...SchemaOption) (id, version int, err error) {
	o, err := applySchemaOptions(opts)
	if err != nil {
		return 0, 0, err
	}
	req := semaq.SchemaRegisterRequest{Subject: subject, Schema: text, SchemaType: o.typ, References: o.refs, Normalize: o.normalize}
	var resp semaq.SchemaRegisterResponse
	if err := c.request(ctx, semaq.APISchemaRegister, req, &resp); err != nil {
		return 0, 0, err
	}
	return resp.ID, resp.Version, nil
}

// Schema returns the schema with a global id; semaq.ErrSchemaIDNotFound if
// there is none. Ids never change, so the client asks the broker once per id
// and answers later calls from memory. The returned Schema is shared: do
// not modify it.
func (c *Client) Schema(ctx context.Context, id int) (*semaq.Schema, error) {
	if id < 1 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: schema id %d: ids start at 1", id)
	}
	cache := c.schemaCache()
	if s, ok := cache.get(id); ok {
		return s, nil
	}
	var s semaq.Schema
	if err := c.request(ctx, semaq.APISchemaGet, semaq.SchemaGetRequest{ID: id}, &s); err != nil {
		return nil, err
	}
	return cache.put(&s), nil
}

// SchemaVersion returns a version of a registry subject: "latest" or a
// number. semaq.ErrSchemaSubjectNotFound or semaq.ErrSchemaVersionNotFound
// when there is none.
func (c *Client) SchemaVersion(ctx context.Context, subject, version string) (*semaq.Schema, error) {
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	var s semaq.Schema
	if err := c.request(ctx, semaq.APISchemaGet, semaq.SchemaGetRequest{Subject: subject, Version: version}, &s); err != nil {
		return nil, err
	}
	c.schemaCache().put(&s)
	return &s, nil
}

// SchemaSubjects lists the registry's subjects, sorted; deleted includes
// those whose versions are all soft-deleted.
func (c *Client) SchemaSubjects(ctx context.Context, deleted bool) ([]string, error) {
	var resp semaq.SchemaSubjectsResponse
	if err := c.request(ctx, semaq.APISchemaSubjects, semaq.SchemaSubjectsRequest{Deleted: deleted}, &resp); err != nil {
		return nil, err
	}
	return resp.Subjects, nil
}

// SchemaVersions lists a subject's version numbers, ascending; deleted
// includes soft-deleted versions.
func (c *Client) SchemaVersions(ctx context.Context, subject string, deleted bool) ([]int, error) {
	var resp semaq.SchemaVersionsResponse
	if err := c.request(ctx, semaq.APISchemaVersions, semaq.SchemaVersionsRequest{Subject: subject, Deleted: deleted}, &resp); err != nil {
		return nil, err
	}
	return resp.Versions, nil
}

// CheckSchema tests a schema against a subject without registering it.
// version "" checks it as RegisterSchema would; "latest" or a number checks
// it against that version alone. An incompatible schema is not an error:
// compatible is false and reasons says why.
func (c *Client) CheckSchema(ctx context.Context, subject, version, text string, opts ...SchemaOption) (compatible bool, reasons []semaq.SchemaIncompatibility, err error) {
	if version != "" {
		if err := checkVersion(version); err != nil {
			return false, nil, err
		}
	}
	o, err := applySchemaOptions(opts)
	if err != nil {
		return false, nil, err
	}
	req := semaq.SchemaCheckRequest{Subject: subject, Version: version, Schema: text, SchemaType: o.typ, References: o.refs}
	var resp semaq.SchemaCheckResponse
	if err := c.request(ctx, semaq.APISchemaCheck, req, &resp); err != nil {
		return false, nil, err
	}
	return resp.Compatible, resp.Reasons, nil
}

// SchemaCompatibility returns the compatibility mode that applies to a
// subject (Inherited when it has none of its own), or the global mode when
// subject is "".
func (c *Client) SchemaCompatibility(ctx context.Context, subject string) (*semaq.SchemaConfig, error) {
	var cfg semaq.SchemaConfig
	if err := c.request(ctx, semaq.APISchemaConfigGet, semaq.SchemaConfigRequest{Subject: subject}, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// SetSchemaCompatibility sets a subject's compatibility mode (the subject
// need not exist yet), or the global mode when subject is "". mode is one
// of semaq.SchemaCompatibilities, any case.
func (c *Client) SetSchemaCompatibility(ctx context.Context, subject, mode string) (*semaq.SchemaConfig, error) {
	m, err := semaq.ParseSchemaCompatibility(mode)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrSchemaInvalidCompatibility, "%v", err)
	}
	var cfg semaq.SchemaConfig
	if err := c.request(ctx, semaq.APISchemaConfigSet, semaq.SchemaConfig{Subject: subject, Compatibility: m}, &cfg); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// DeleteSchema deletes one version of a subject ("latest" or a number), or
// every version when version is "", and returns the versions deleted. A
// soft delete hides them (their ids stay readable); permanent removes
// versions soft-deleted before (semaq.ErrSchemaVersionNotSoftDeleted or
// semaq.ErrSchemaSubjectNotSoftDeleted otherwise).
func (c *Client) DeleteSchema(ctx context.Context, subject, version string, permanent bool) ([]int, error) {
	if version != "" {
		if err := checkVersion(version); err != nil {
			return nil, err
		}
	}
	var resp semaq.SchemaDeleteResponse
	req := semaq.SchemaDeleteRequest{Subject: subject, Version: version, Permanent: permanent}
	if err := c.request(ctx, semaq.APISchemaDelete, req, &resp); err != nil {
		return nil, err
	}
	return resp.Versions, nil
}

// BindSchema makes the broker validate messages published on NATS subjects
// matching pattern against the registry subject's schemas. The subject
// needs a live version; binding a pattern again replaces its subject.
func (c *Client) BindSchema(ctx context.Context, pattern, subject string) error {
	return c.request(ctx, semaq.APISchemaBind, semaq.SchemaBinding{Pattern: pattern, Subject: subject}, nil)
}

// UnbindSchema removes the binding of pattern; semaq.ErrSchemaBindingNotFound
// when there is none.
func (c *Client) UnbindSchema(ctx context.Context, pattern string) error {
	return c.request(ctx, semaq.APISchemaUnbind, semaq.SchemaBinding{Pattern: pattern}, nil)
}

// SchemaBindings lists the bindings, sorted by pattern.
func (c *Client) SchemaBindings(ctx context.Context) ([]semaq.SchemaBinding, error) {
	var resp semaq.SchemaBindingsResponse
	if err := c.request(ctx, semaq.APISchemaBindings, nil, &resp); err != nil {
		return nil, err
	}
	return resp.Bindings, nil
}

// SchemaFor returns the schema a NATS subject is bound to now: the most
// specific matching binding, and the id, version and type of its registry
// subject's latest version. semaq.ErrSchemaBindingNotFound when no binding
// matches. It always asks the broker: the latest version changes.
func (c *Client) SchemaFor(ctx context.Context, natsSubject string) (*semaq.SchemaLookup, error) {
	var l semaq.SchemaLookup
	if err := c.request(ctx, semaq.APISchemaLookup, semaq.SchemaLookupRequest{Subject: natsSubject}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// WithSchemaID names the registry schema of the payload (AI-Schema-Id).
func WithSchemaID(id int) PublishOption {
	return func(h nats.Header) error {
		if id < 1 {
			return fmt.Errorf("client: WithSchemaID: %d is not a schema id (ids start at 1)", id)
		}
		h.Set(semaq.HdrSchemaID, strconv.Itoa(id))
		return nil
	}
}

// ConfluentFrame prefixes payload with Confluent's wire header: the magic
// byte 0 and the schema id as 4 bytes, big-endian, as Confluent's Avro and
// Protobuf serializers write it (a Protobuf payload starts with its
// message-index list). Registry ids fit in 31 bits; only the low 32 bits of
// id are written.
func ConfluentFrame(id int, payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	return append(out, payload...)
}

// ErrNotConfluentFrame is returned by SplitConfluentFrame for data that does
// not start with Confluent's wire header.
var ErrNotConfluentFrame = errors.New("client: not a Confluent-framed payload")

// SplitConfluentFrame reads the schema id of a payload framed by
// ConfluentFrame (or any Confluent serializer) and returns it with the bytes
// after the header. The payload shares frame's memory.
func SplitConfluentFrame(frame []byte) (id int, payload []byte, err error) {
	if len(frame) < 5 || frame[0] != 0 {
		return 0, nil, ErrNotConfluentFrame
	}
	v := binary.BigEndian.Uint32(frame[1:5])
	if v == 0 || v > math.MaxInt32 {
		return 0, nil, fmt.Errorf("%w: schema id %d", ErrNotConfluentFrame, v)
	}
	return int(v), frame[5:], nil
}

// schemaCache holds the schemas a client has read, by id. Entries never
// expire: an id always names the same schema. The zero value is ready.
type schemaCache struct {
	mu sync.RWMutex
	m  map[int]*semaq.Schema
}

func (sc *schemaCache) get(id int) (*semaq.Schema, bool) {
	sc.mu.RLock()
	defer sc.mu.RUnlock()
	s, ok := sc.m[id]
	return s, ok
}

// put keeps the id's immutable part of s (not its subject or version) and
// returns the cached entry.
func (sc *schemaCache) put(s *semaq.Schema) *semaq.Schema {
	e := &semaq.Schema{ID: s.ID, Type: s.Type, Text: s.Text, References: slices.Clone(s.References)}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if old, ok := sc.m[e.ID]; ok {
		return old
	}
	if sc.m == nil {
		sc.m = make(map[int]*semaq.Schema)
	}
	sc.m[e.ID] = e
	return e
}

func (c *Client) schemaCache() *schemaCache { return &c.schemas }
