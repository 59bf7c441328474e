// Package protofmt is the Protobuf format of the schema registry: .proto
// files compiled by protocompile within schema.Limits, a canonical text,
// validation of Confluent's message-index prefix and the binary message,
// and Confluent's compatibility rules for Protobuf.
package protofmt

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/linker"
	"github.com/bufbuild/protocompile/reporter"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/semaq/semaq/internal/schema"
)

// New returns the Protobuf format with the default limits.
func New() schema.LimitedFormat { return protobufFormat{} }

const (
	// protobufMaxRefs bounds how many referenced files one Parse resolves,
	// so a runaway reference graph cannot make a Parse unbounded.
	protobufMaxRefs = 256
	// protobufMaxErrors bounds how many compiler errors one Parse reports.
	protobufMaxErrors = 10
	// protobufMainFile is the name the schema text is compiled under; it
	// shows in error positions (schema.proto:3:5).
	protobufMainFile = "schema.proto"
)

// protobufFormat is the Protobuf format, with Confluent Schema Registry's
// meaning: the schema is one .proto file (proto2, proto3 or editions), its
// references are the files it imports (Reference.Name is the import path),
// and a payload is Confluent's message-index list followed by the binary
// message. google/protobuf/*.proto imports need no reference.
//
// protocompile does the parsing and linking, so a schema is exactly what
// protoc would accept. Canonical() is the file printed back from its
// descriptor (protobuf_canonical.go): comments, whitespace, import order and
// the spelling of type names (relative or fully qualified) do not change it,
// and it parses back to the same descriptor.
//
// schema.Limits (../limits.go) are checked on every file before
// protocompile reads it: size, nesting of braces, brackets and parentheses
// (messages in messages, option literals), number of tokens.
type protobufFormat struct{ limits schema.Limits }

func (protobufFormat) Type() schema.Type { return schema.TypeProtobuf }

// WithLimits implements LimitedFormat.
func (protobufFormat) WithLimits(l schema.Limits) schema.Format { return protobufFormat{limits: l} }

func (f protobufFormat) Parse(text string, refs []schema.Reference, resolve schema.Resolver) (schema.Schema, error) {
	b := schema.NewBudget(f.limits)
	if err := protobufText(b, "the schema", text); err != nil {
		return nil, err
	}
	sources := make(map[string]string)
	fileRefs := make(map[string]schema.Reference)
	if err := protobufResolveRefs(refs, resolve, sources, fileRefs); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		if err := protobufText(b, fmt.Sprintf("reference %q", name), sources[name]); err != nil {
			return nil, err
		}
	}
	main := protobufMainFile
	for i := 2; ; i++ {
		if _, taken := sources[main]; !taken {
			break
		}
		main = fmt.Sprintf("schema-%d.proto", i)
	}
	sources[main] = text

	var errs []string
	rep := reporter.NewReporter(func(err reporter.ErrorWithPos) error {
		if len(errs) < protobufMaxErrors {
			errs = append(errs, err.Error())
		}
		return nil // keep going: report every error, not only the first
	}, nil)
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(path string) (io.ReadCloser, error) {
				src, ok := sources[path]
				if !ok {
					return nil, fmt.Errorf("no reference is named %q (a reference's name is the import path)", path)
				}
				return io.NopCloser(strings.NewReader(src)), nil
			},
		}),
		MaxParallelism: 1,
		Reporter:       rep,
	}
	files, err := c.Compile(context.Background(), main)
	if len(errs) > 0 {
		return nil, fmt.Errorf("protobuf schema: %s", strings.Join(errs, "; "))
	}
	if err != nil {
		return nil, fmt.Errorf("protobuf schema: %w", err)
	}
	file, types := protobufNative(files[0])
	return &protobufSchema{
		file:      file,
		types:     types,
		refs:      fileRefs,
		canonical: protobufCanonical(file),
	}, nil
}

// protobufTypes resolves the messages and extensions of a schema's files.
type protobufTypes interface {
	protoregistry.MessageTypeResolver
	protoregistry.ExtensionTypeResolver
}

// protobufNative rebuilds the compiled files with protodesc. protocompile's
// descriptors work out features (field presence...) on every call, which
// was a large share of dynamicpb's decoding time; protodesc's are plain
// data.
// Should protodesc refuse what protocompile accepted, the compiled ones
// serve.
func protobufNative(file linker.File) (protoreflect.FileDescriptor, protobufTypes) {
	set := &descriptorpb.FileDescriptorSet{}
	seen := make(map[string]bool)
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := 0; i < fd.Imports().Len(); i++ {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(file)
	files, err := protodesc.NewFiles(set)
	if err == nil {
		if fd, err := files.FindFileByPath(file.Path()); err == nil {
			return fd, dynamicpb.NewTypes(files)
		}
	}
	return file, linker.ResolverFromFile(file)
}

// protobufResolveRefs loads the referenced files, transitively, into
// sources (import path → text) and records which registered schema each
// came from in fileRefs (compatibility checks skip identical ones).
func protobufResolveRefs(refs []schema.Reference, resolve schema.Resolver, sources map[string]string, fileRefs map[string]schema.Reference) error {
	for _, ref := range refs {
		if _, done := fileRefs[ref.Name]; done {
			continue
		}
		if ref.Name == "" {
			return fmt.Errorf("protobuf schema: reference to subject %q version %d has no name (the import path)", ref.Subject, ref.Version)
		}
		if resolve == nil {
			return fmt.Errorf("protobuf schema: reference %q: no resolver", ref.Name)
		}
		if len(fileRefs) >= protobufMaxRefs {
			return fmt.Errorf("protobuf schema: more than %d referenced files", protobufMaxRefs)
		}
		text, typ, subRefs, err := resolve(ref)
		if err != nil {
			return fmt.Errorf("protobuf schema: reference %q (subject %q version %d): %w", ref.Name, ref.Subject, ref.Version, err)
		}
		if typ != "" && !strings.EqualFold(string(typ), string(schema.TypeProtobuf)) {
			return fmt.Errorf("protobuf schema: reference %q (subject %q version %d) is a %s schema, not PROTOBUF", ref.Name, ref.Subject, ref.Version, typ)
		}
		fileRefs[ref.Name] = ref
		sources[ref.Name] = text
		if err := protobufResolveRefs(subRefs, resolve, sources, fileRefs); err != nil {
			return err
		}
	}
	return nil
}

// protobufSchema is a compiled .proto file.
type protobufSchema struct {
	file protoreflect.FileDescriptor
	// types finds the extensions of file and its imports, for decoding
	// payloads.
	types protobufTypes
	// plans caches, per message descriptor, what Validate checks in it.
	plans sync.Map // protoreflect.MessageDescriptor → *protobufPlan
	// refs maps each referenced file's import path to its registered
	// schema. Files absent from it are google/protobuf/* imports.
	refs      map[string]schema.Reference
	canonical string
}

func (s *protobufSchema) Type() schema.Type { return schema.TypeProtobuf }
func (s *protobufSchema) Canonical() string { return s.canonical }

// Validate decodes a payload: the message-index list picks the message type
// among the file's messages, the rest must be that message's binary
// encoding. Beyond well-formed wire data it checks what a decoder would
// silently accept: proto2 required fields that are missing, and fields whose
// wire type contradicts their declaration (a decoder keeps those as unknown
// fields, so the reader sees the default value).
func (s *protobufSchema) Validate(payload []byte) error {
	md, n, err := protobufDecodeIndexes(s.file, payload)
	if err != nil {
		return err
	}
	msg := dynamicpb.NewMessage(md)
	opts := proto.UnmarshalOptions{AllowPartial: true, Resolver: s.types}
	if err := opts.Unmarshal(payload[n:], msg); err != nil {
		return &schema.ValidationError{
			Path:    string(md.FullName()),
			Rule:    "decode",
			Message: fmt.Sprintf("not a valid %s: %s", md.FullName(), strings.TrimPrefix(err.Error(), "proto: ")),
		}
	}
	c := protobufChecker{s: s}
	c.path = c.stack[:0]
	if verr := c.message(msg); verr != nil {
		return verr
	}
	return nil
}

// protobufPlan is what the checker looks at in one message type.
type protobufPlan struct {
	required []protoreflect.FieldDescriptor
	// messages are the fields holding messages: singular, lists, maps.
	messages []protoreflect.FieldDescriptor
	// extendable messages may hold message-typed extensions.
	extendable bool
}

func (s *protobufSchema) plan(md protoreflect.MessageDescriptor) *protobufPlan {
	if p, ok := s.plans.Load(md); ok {
		return p.(*protobufPlan)
	}
	p := &protobufPlan{extendable: md.ExtensionRanges().Len() > 0}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Cardinality() == protoreflect.Required {
			p.required = append(p.required, fd)
		}
		if protobufIsMessage(fd) || (fd.IsMap() && protobufIsMessage(fd.MapValue())) {
			p.messages = append(p.messages, fd)
		}
	}
	s.plans.Store(md, p)
	return p
}

// protobufChecker walks a decoded message for missing required fields and
// unknown fields that carry a declared field number. It keeps the path as
// a stack and only prints it for an error.
type protobufChecker struct {
	s     *protobufSchema
	path  []protobufStep
	stack [8]protobufStep
}

type protobufStep struct {
	name  string
	index int                // list element, or -1
	key   protoreflect.Value // map key, when valid
}

func (c *protobufChecker) fail(rule, name, format string, args ...any) *schema.ValidationError {
	var b strings.Builder
	for _, st := range c.path {
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(st.name)
		switch {
		case st.key.IsValid():
			b.WriteString("[" + strconv.Quote(st.key.String()) + "]")
		case st.index >= 0:
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
		}
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.WriteString(name)
	return &schema.ValidationError{Path: b.String(), Rule: rule, Message: fmt.Sprintf(format, args...)}
}

func (c *protobufChecker) message(m protoreflect.Message) *schema.ValidationError {
	md := m.Descriptor()
	p := c.s.plan(md)
	for _, fd := range p.required {
		if !m.Has(fd) {
			return c.fail("required", string(fd.Name()), "required field %s is missing", fd.FullName())
		}
	}
	if unknown := m.GetUnknown(); len(unknown) > 0 {
		if verr := c.unknown(md, unknown); verr != nil {
			return verr
		}
	}
	for _, fd := range p.messages {
		if !m.Has(fd) {
			continue
		}
		if verr := c.field(fd, string(fd.Name()), m.Get(fd)); verr != nil {
			return verr
		}
	}
	if !p.extendable {
		return nil
	}
	var verr *schema.ValidationError
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.IsExtension() && protobufIsMessage(fd) {
			verr = c.field(fd, "["+string(fd.FullName())+"]", v)
		}
		return verr == nil
	})
	return verr
}

// field checks the messages one field holds.
func (c *protobufChecker) field(fd protoreflect.FieldDescriptor, name string, v protoreflect.Value) *schema.ValidationError {
	depth := len(c.path)
	defer func() { c.path = c.path[:depth] }()
	switch {
	case fd.IsMap():
		var verr *schema.ValidationError
		v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
			c.path = append(c.path[:depth], protobufStep{name: name, index: -1, key: k.Value()})
			verr = c.message(mv.Message())
			return verr == nil
		})
		return verr
	case fd.IsList():
		l := v.List()
		for i := 0; i < l.Len(); i++ {
			c.path = append(c.path[:depth], protobufStep{name: name, index: i})
			if verr := c.message(l.Get(i).Message()); verr != nil {
				return verr
			}
		}
		return nil
	}
	c.path = append(c.path, protobufStep{name: name, index: -1})
	return c.message(v.Message())
}

// unknown reports an unknown field whose number is declared: the payload
// used a wire type the declaration does not allow.
func (c *protobufChecker) unknown(md protoreflect.MessageDescriptor, b []byte) *schema.ValidationError {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil // cannot happen: Unmarshal accepted these bytes
		}
		if fd := md.Fields().ByNumber(num); fd != nil {
			return c.fail("wire-type", string(fd.Name()), "field %s (number %d) is declared %s but the payload has wire type %d",
				fd.FullName(), num, strings.TrimPrefix(protobufTypeName(fd), "."), typ)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil
		}
		b = b[n+m:]
	}
	return nil
}

func protobufIsMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
}

// protobufMessages lists the message types that count for Confluent's
// message indexes: the declared ones, without the synthetic map entries.
// Walking the list allocates nothing in the common case (no map fields).
func protobufMessages(msgs protoreflect.MessageDescriptors, fn func(i int, md protoreflect.MessageDescriptor) bool) {
	i := 0
	for j := 0; j < msgs.Len(); j++ {
		md := msgs.Get(j)
		if md.IsMapEntry() {
			continue
		}
		if !fn(i, md) {
			return
		}
		i++
	}
}

// protobufMessageAt returns the index-th message (map entries skipped).
func protobufMessageAt(msgs protoreflect.MessageDescriptors, index int64) protoreflect.MessageDescriptor {
	var found protoreflect.MessageDescriptor
	protobufMessages(msgs, func(i int, md protoreflect.MessageDescriptor) bool {
		if int64(i) == index {
			found = md
			return false
		}
		return true
	})
	return found
}

// protobufDecodeIndexes reads Confluent's message-index list at the start
// of payload and returns the message type it names and the bytes it took.
// The list is a zig-zag varint count followed by that many zig-zag varint
// indexes, each into the message types of the previous one (the file's for
// the first); a count of 0 stands for [0], the file's first message.
func protobufDecodeIndexes(file protoreflect.FileDescriptor, payload []byte) (protoreflect.MessageDescriptor, int, error) {
	bad := func(format string, args ...any) error {
		return &schema.ValidationError{Rule: "message-index", Message: fmt.Sprintf(format, args...)}
	}
	raw, n := protowire.ConsumeVarint(payload)
	if n < 0 {
		return nil, 0, bad("the payload does not start with a message-index list")
	}
	count := protowire.DecodeZigZag(raw)
	if count < 0 || count > int64(len(payload)-n) {
		return nil, 0, bad("message-index count %d is out of range", count)
	}
	if count == 0 {
		md := protobufMessageAt(file.Messages(), 0)
		if md == nil {
			return nil, 0, bad("the schema declares no message type")
		}
		return md, n, nil
	}
	var md protoreflect.MessageDescriptor
	msgs := file.Messages()
	for i := int64(0); i < count; i++ {
		raw, m := protowire.ConsumeVarint(payload[n:])
		if m < 0 {
			return nil, 0, bad("message index %d is truncated", i)
		}
		n += m
		index := protowire.DecodeZigZag(raw)
		next := protobufMessageAt(msgs, index)
		if next == nil {
			where := "the file"
			if md != nil {
				where = string(md.FullName())
			}
			return nil, 0, bad("message index %d (%d) is out of range: %s has fewer message types", i, index, where)
		}
		md, msgs = next, next.Messages()
	}
	return md, n, nil
}

// MessageIndexes returns the Confluent message-index prefix that names
// the message type fullName (package included, as in "shop.Order.Line"):
// what a producer writes after the magic byte and schema id, before the
// binary message. The first message of the file gets the one-byte form, 0.
// Map entry types do not count, as in Confluent's registry. It makes a
// Protobuf schema a schema.MessageIndexer (schema.ProtobufMessageIndexes).
func (ps *protobufSchema) MessageIndexes(fullName string) ([]byte, error) {
	name := protoreflect.FullName(strings.TrimPrefix(fullName, "."))
	path, ok := protobufIndexPath(ps.file.Messages(), name, nil)
	if !ok {
		return nil, fmt.Errorf("schema: the Protobuf schema declares no message type %q", fullName)
	}
	if len(path) == 1 && path[0] == 0 {
		return []byte{0}, nil
	}
	out := protowire.AppendVarint(nil, protowire.EncodeZigZag(int64(len(path))))
	for _, i := range path {
		out = protowire.AppendVarint(out, protowire.EncodeZigZag(int64(i)))
	}
	return out, nil
}

func protobufIndexPath(msgs protoreflect.MessageDescriptors, name protoreflect.FullName, prefix []int) ([]int, bool) {
	var (
		path  []int
		found bool
	)
	protobufMessages(msgs, func(i int, md protoreflect.MessageDescriptor) bool {
		switch {
		case md.FullName() == name:
			path, found = append(append([]int(nil), prefix...), i), true
		case strings.HasPrefix(string(name), string(md.FullName())+"."):
			path, found = protobufIndexPath(md.Messages(), name, append(prefix, i))
		}
		return !found
	})
	return path, found
}
