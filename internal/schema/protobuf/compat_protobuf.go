package protofmt

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/semaq/semaq/internal/schema"
)

// Protobuf change kinds, as Confluent's protobuf-provider names them. The
// diff records every change; Compatibility reports the ones that are not in
// protobufCompatibleChanges.
const (
	protobufPackageChanged          = "PACKAGE_CHANGED"
	protobufMessageAdded            = "MESSAGE_ADDED"
	protobufMessageRemoved          = "MESSAGE_REMOVED"
	protobufMessageMoved            = "MESSAGE_MOVED"
	protobufEnumAdded               = "ENUM_ADDED"
	protobufEnumRemoved             = "ENUM_REMOVED"
	protobufEnumConstAdded          = "ENUM_CONST_ADDED"
	protobufEnumConstChanged        = "ENUM_CONST_CHANGED"
	protobufEnumConstRemoved        = "ENUM_CONST_REMOVED"
	protobufFieldAdded              = "FIELD_ADDED"
	protobufFieldRemoved            = "FIELD_REMOVED"
	protobufFieldNameChanged        = "FIELD_NAME_CHANGED"
	protobufFieldKindChanged        = "FIELD_KIND_CHANGED"
	protobufFieldScalarKindChanged  = "FIELD_SCALAR_KIND_CHANGED"
	protobufFieldNamedTypeChanged   = "FIELD_NAMED_TYPE_CHANGED"
	protobufFieldNumericLabel       = "FIELD_NUMERIC_LABEL_CHANGED"
	protobufFieldStringOrBytesLabel = "FIELD_STRING_OR_BYTES_LABEL_CHANGED"
	protobufRequiredFieldAdded      = "REQUIRED_FIELD_ADDED"
	protobufRequiredFieldRemoved    = "REQUIRED_FIELD_REMOVED"
	protobufOneofAdded              = "ONEOF_ADDED"
	protobufOneofRemoved            = "ONEOF_REMOVED"
	protobufOneofFieldAdded         = "ONEOF_FIELD_ADDED"
	protobufOneofFieldRemoved       = "ONEOF_FIELD_REMOVED"
	protobufOneofFieldMovedToTop    = "ONEOF_FIELD_MOVED_TO_TOP_LEVEL"
	protobufMultipleFieldsToOneof   = "MULTIPLE_FIELDS_MOVED_TO_ONEOF"
	protobufFieldToExistingOneof    = "FIELD_MOVED_TO_EXISTING_ONEOF"
)

// protobufCompatibleChanges are the changes that keep data written with the
// old schema readable with the new one.
var protobufCompatibleChanges = map[string]bool{
	protobufMessageAdded:            true,
	protobufMessageMoved:            true, // indexes are resolved against the writer's schema id
	protobufEnumAdded:               true,
	protobufEnumRemoved:             true,
	protobufEnumConstAdded:          true,
	protobufEnumConstChanged:        true,
	protobufEnumConstRemoved:        true,
	protobufFieldAdded:              true,
	protobufFieldRemoved:            true, // the reader skips the unknown number
	protobufFieldNameChanged:        true, // the wire carries numbers, not names
	protobufFieldStringOrBytesLabel: true, // a length-delimited value reads as one element
	protobufOneofAdded:              true,
	protobufOneofRemoved:            true,
	protobufOneofFieldAdded:         true,
	protobufOneofFieldMovedToTop:    true,
}

// protobufChange is one difference between a writer (original) and a
// reader (update) schema.
type protobufChange struct {
	Rule    string
	Path    string
	Message string
}

func (protobufFormat) Compatibility(reader, writer schema.Schema) []schema.Incompatibility {
	r, rok := reader.(*protobufSchema)
	w, wok := writer.(*protobufSchema)
	if !rok || !wok {
		return []schema.Incompatibility{{
			Path:    ".",
			Rule:    "TYPE_MISMATCH",
			Message: "both schemas must be Protobuf schemas",
		}}
	}
	var out []schema.Incompatibility
	seen := make(map[protobufChange]bool)
	for _, c := range protobufDiff(w, r) {
		if protobufCompatibleChanges[c.Rule] || seen[c] {
			continue
		}
		seen[c] = true
		out = append(out, schema.Incompatibility{Path: c.Path, Rule: c.Rule, Message: c.Message})
	}
	return out
}

// protobufDiff lists the changes from writer to reader, compatible ones
// included, following Confluent's protobuf-provider diff: types are matched
// by name within their scope, fields by number, enum constants by number.
// Paths are element full names (shop.Order.status) on the reader's side, or
// the writer's for what the reader lacks.
func protobufDiff(writer, reader *protobufSchema) []protobufChange {
	d := &protobufDiffer{
		writer: writer,
		reader: reader,
		active: make(map[protoreflect.MessageDescriptor]bool),
		memo:   make(map[[2]protoreflect.MessageDescriptor][]protobufChange),
	}
	wf, rf := writer.file, reader.file
	if wf.Package() != rf.Package() {
		path := string(rf.Package())
		if path == "" {
			path = string(wf.Package())
		}
		d.add(protobufPackageChanged, path, "the package changed from %q to %q", wf.Package(), rf.Package())
	}
	d.types(wf.Messages(), wf.Enums(), rf.Messages(), rf.Enums())
	return d.changes
}

type protobufDiffer struct {
	writer, reader *protobufSchema
	changes        []protobufChange
	// active holds the writer messages whose fields are being compared,
	// so recursive types end.
	active map[protoreflect.MessageDescriptor]bool
	// memo holds the diff of imported message pairs already compared.
	memo map[[2]protoreflect.MessageDescriptor][]protobufChange
}

func (d *protobufDiffer) add(rule, path, format string, args ...any) {
	d.changes = append(d.changes, protobufChange{Rule: rule, Path: path, Message: fmt.Sprintf(format, args...)})
}

// types compares the messages and enums declared in one scope.
func (d *protobufDiffer) types(wMsgs protoreflect.MessageDescriptors, wEnums protoreflect.EnumDescriptors,
	rMsgs protoreflect.MessageDescriptors, rEnums protoreflect.EnumDescriptors) {
	type indexed struct {
		md    protoreflect.MessageDescriptor
		index int
	}
	index := func(msgs protoreflect.MessageDescriptors) (map[protoreflect.Name]indexed, []protoreflect.Name) {
		m := make(map[protoreflect.Name]indexed)
		var order []protoreflect.Name
		protobufMessages(msgs, func(i int, md protoreflect.MessageDescriptor) bool {
			m[md.Name()] = indexed{md, i}
			order = append(order, md.Name())
			return true
		})
		return m, order
	}
	wm, worder := index(wMsgs)
	rm, rorder := index(rMsgs)
	for _, name := range worder {
		w := wm[name]
		r, ok := rm[name]
		if !ok {
			d.add(protobufMessageRemoved, string(w.md.FullName()), "message %s was removed", w.md.FullName())
			continue
		}
		d.message(w.md, r.md)
		if w.index != r.index {
			d.add(protobufMessageMoved, string(r.md.FullName()), "message %s moved from index %d to %d", r.md.FullName(), w.index, r.index)
		}
	}
	for _, name := range rorder {
		if _, ok := wm[name]; !ok {
			d.add(protobufMessageAdded, string(rm[name].md.FullName()), "message %s was added", rm[name].md.FullName())
		}
	}

	for i := 0; i < wEnums.Len(); i++ {
		we := wEnums.Get(i)
		if re := rEnums.ByName(we.Name()); re != nil {
			d.enum(we, re)
		} else {
			d.add(protobufEnumRemoved, string(we.FullName()), "enum %s was removed", we.FullName())
		}
	}
	for i := 0; i < rEnums.Len(); i++ {
		if re := rEnums.Get(i); wEnums.ByName(re.Name()) == nil {
			d.add(protobufEnumAdded, string(re.FullName()), "enum %s was added", re.FullName())
		}
	}
}

func (d *protobufDiffer) enum(we, re protoreflect.EnumDescriptor) {
	byNumber := func(ed protoreflect.EnumDescriptor) map[protoreflect.EnumNumber]protoreflect.Name {
		m := make(map[protoreflect.EnumNumber]protoreflect.Name)
		for i := 0; i < ed.Values().Len(); i++ {
			v := ed.Values().Get(i)
			m[v.Number()] = v.Name() // with allow_alias, the last alias counts
		}
		return m
	}
	wv, rv := byNumber(we), byNumber(re)
	for _, n := range protobufSortedKeys(wv, rv) {
		w, wok := wv[n]
		r, rok := rv[n]
		switch {
		case !rok:
			d.add(protobufEnumConstRemoved, string(we.FullName())+"."+string(w), "enum constant %s = %d was removed", w, n)
		case !wok:
			d.add(protobufEnumConstAdded, string(re.FullName())+"."+string(r), "enum constant %s = %d was added", r, n)
		case w != r:
			d.add(protobufEnumConstChanged, string(re.FullName())+"."+string(r), "enum constant %d was renamed from %s to %s", n, w, r)
		}
	}
}

func protobufSortedKeys[K ~int32, V any](a, b map[K]V) []K {
	keys := make([]K, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

// protobufRealOneof is the oneof a field belongs to, nil for none or the
// synthetic oneof of a proto3 optional field.
func protobufRealOneof(fd protoreflect.FieldDescriptor) protoreflect.OneofDescriptor {
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		return od
	}
	return nil
}

// message compares two versions of a message: fields by number wherever
// they sit (top level or in a oneof), so moving a field between oneofs
// cannot hide a type change, then oneof membership, then nested types.
func (d *protobufDiffer) message(w, r protoreflect.MessageDescriptor) {
	if !d.active[w] {
		d.active[w] = true
		d.fields(w, r)
		delete(d.active, w)
	}
	d.types(w.Messages(), w.Enums(), r.Messages(), r.Enums())
}

func (d *protobufDiffer) fields(w, r protoreflect.MessageDescriptor) {
	wFields, rFields := w.Fields(), r.Fields()

	// A writer oneof gone by name with none of its members left anywhere
	// was deleted whole, which readers survive; if some members moved
	// elsewhere, the ones dropped are removals from a oneof.
	deleted := make(map[protoreflect.Name]bool)
	for i := 0; i < w.Oneofs().Len(); i++ {
		od := w.Oneofs().Get(i)
		if od.IsSynthetic() || r.Oneofs().ByName(od.Name()) != nil {
			continue
		}
		survives := false
		for j := 0; j < od.Fields().Len(); j++ {
			if rFields.ByNumber(od.Fields().Get(j).Number()) != nil {
				survives = true
				break
			}
		}
		if !survives {
			deleted[od.Name()] = true
		}
	}

	// A reader oneof whose existing members came from more than one place
	// (a writer oneof, or each a top-level field) makes fields exclusive
	// that were independent: old data may set several of them.
	for i := 0; i < r.Oneofs().Len(); i++ {
		od := r.Oneofs().Get(i)
		if od.IsSynthetic() {
			continue
		}
		origins := make(map[string]bool)
		movedIn := 0
		for j := 0; j < od.Fields().Len(); j++ {
			wf := wFields.ByNumber(od.Fields().Get(j).Number())
			switch {
			case wf == nil:
			case protobufRealOneof(wf) != nil:
				origins["oneof "+string(protobufRealOneof(wf).Name())] = true
			default:
				origins["field "+string(wf.Name())] = true
				movedIn++
			}
		}
		if len(origins) > 1 {
			if movedIn > 1 {
				d.add(protobufMultipleFieldsToOneof, string(od.FullName()),
					"oneof %s takes %d fields that were independent: old data may set more than one", od.FullName(), movedIn)
			} else {
				d.add(protobufFieldToExistingOneof, string(od.FullName()),
					"oneof %s takes members from %d places (fields or other oneofs): old data may set more than one", od.FullName(), len(origins))
			}
		}
	}

	for i := 0; i < w.Oneofs().Len(); i++ {
		if od := w.Oneofs().Get(i); !od.IsSynthetic() && r.Oneofs().ByName(od.Name()) == nil {
			d.add(protobufOneofRemoved, string(od.FullName()), "oneof %s was removed", od.FullName())
		}
	}
	for i := 0; i < r.Oneofs().Len(); i++ {
		if od := r.Oneofs().Get(i); !od.IsSynthetic() && w.Oneofs().ByName(od.Name()) == nil {
			d.add(protobufOneofAdded, string(od.FullName()), "oneof %s was added", od.FullName())
		}
	}

	numbers := make(map[protoreflect.FieldNumber]bool)
	for i := 0; i < wFields.Len(); i++ {
		numbers[wFields.Get(i).Number()] = true
	}
	for i := 0; i < rFields.Len(); i++ {
		numbers[rFields.Get(i).Number()] = true
	}
	for _, n := range protobufSortedKeys(numbers, nil) {
		wf, rf := wFields.ByNumber(n), rFields.ByNumber(n)
		switch {
		case rf == nil:
			wo := protobufRealOneof(wf)
			switch {
			case wo != nil && deleted[wo.Name()]:
			case wo != nil:
				d.add(protobufOneofFieldRemoved, string(wf.FullName()),
					"field %s (number %d) was removed from oneof %s: old data that set it loses the oneof's value", wf.Name(), n, wo.Name())
			case wf.Cardinality() == protoreflect.Required:
				d.add(protobufRequiredFieldRemoved, string(wf.FullName()), "required field %s (number %d) was removed", wf.Name(), n)
			default:
				d.add(protobufFieldRemoved, string(wf.FullName()), "field %s (number %d) was removed", wf.Name(), n)
			}
		case wf == nil:
			switch {
			case protobufRealOneof(rf) != nil:
				d.add(protobufOneofFieldAdded, string(rf.FullName()), "field %s (number %d) was added to oneof %s", rf.Name(), n, protobufRealOneof(rf).Name())
			case rf.Cardinality() == protoreflect.Required:
				d.add(protobufRequiredFieldAdded, string(rf.FullName()),
					"required field %s (number %d) was added: old data does not have it", rf.Name(), n)
			default:
				d.add(protobufFieldAdded, string(rf.FullName()), "field %s (number %d) was added", rf.Name(), n)
			}
		default:
			if protobufRealOneof(wf) != nil && protobufRealOneof(rf) == nil {
				d.add(protobufOneofFieldMovedToTop, string(rf.FullName()),
					"field %s (number %d) moved out of oneof %s", rf.Name(), n, protobufRealOneof(wf).Name())
			}
			d.field(wf, rf)
		}
	}
}

func (d *protobufDiffer) field(w, r protoreflect.FieldDescriptor) {
	path := string(r.FullName())
	if w.Name() != r.Name() {
		d.add(protobufFieldNameChanged, path, "field number %d was renamed from %s to %s", r.Number(), w.Name(), r.Name())
	}
	d.fieldType(path, protobufLabel(w), protobufLabel(r), w, r)
}

// protobufLabel is a field's label as written in the .proto text; "" when
// none is written (proto3 and editions singular fields, oneof members, map
// fields). Like Confluent, label changes are only compared when both sides
// wrote one.
func protobufLabel(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap() || protobufRealOneof(fd) != nil:
		return ""
	case fd.Cardinality() == protoreflect.Repeated:
		return "repeated"
	case fd.Cardinality() == protoreflect.Required:
		return "required"
	case fd.ParentFile().Syntax() == protoreflect.Proto2 || fd.HasOptionalKeyword():
		return "optional"
	}
	return ""
}

const (
	protobufKindScalar  = "scalar"
	protobufKindMessage = "message"
	protobufKindMap     = "map"
)

func protobufFieldKind(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return protobufKindMap
	case protobufIsMessage(fd):
		return protobufKindMessage
	}
	return protobufKindScalar // enums included: they are varints on the wire
}

// protobufScalarGroup groups the scalar types whose values read across:
// the same wire type and the same integer encoding.
func protobufScalarGroup(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.BoolKind:
		return "varint"
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return "zigzag varint"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "length-delimited"
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return "fixed32"
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return "fixed64"
	case protoreflect.FloatKind:
		return "float"
	case protoreflect.DoubleKind:
		return "double"
	}
	return fd.Kind().String()
}

func (d *protobufDiffer) fieldType(path, wLabel, rLabel string, w, r protoreflect.FieldDescriptor) {
	wk, rk := protobufFieldKind(w), protobufFieldKind(r)
	if wk != rk {
		d.add(protobufFieldKindChanged, path, "field number %d changed from a %s (%s) to a %s (%s)",
			r.Number(), wk, protobufTypeName(w), rk, protobufTypeName(r))
		return
	}
	switch wk {
	case protobufKindScalar:
		wg, rg := protobufScalarGroup(w), protobufScalarGroup(r)
		if wg != rg {
			d.add(protobufFieldScalarKindChanged, path, "field number %d changed from %s (%s) to %s (%s)",
				r.Number(), strings.TrimPrefix(protobufTypeName(w), "."), wg, strings.TrimPrefix(protobufTypeName(r), "."), rg)
			return
		}
		if wLabel == "" || rLabel == "" || wLabel == rLabel {
			return
		}
		rule := protobufFieldNumericLabel
		if wg == "length-delimited" {
			rule = protobufFieldStringOrBytesLabel
		}
		d.add(rule, path, "field number %d changed from %s to %s", r.Number(), wLabel, rLabel)
	case protobufKindMessage:
		d.messageType(path, w.Message(), r.Message())
	case protobufKindMap:
		d.fieldType(path, "", "", w.MapKey(), r.MapKey())
		d.fieldType(path, "", "", w.MapValue(), r.MapValue())
	}
}

// messageType compares the message types of one field. Types are the same
// when their names match once the package is dropped; a type from another
// file is compared in full unless both sides take it from the same
// registered schema version.
func (d *protobufDiffer) messageType(path string, w, r protoreflect.MessageDescriptor) {
	wName, rName := protobufLocalName(w), protobufLocalName(r)
	if wName != rName {
		d.add(protobufFieldNamedTypeChanged, path, "the type changed from %s to %s", w.FullName(), r.FullName())
		return
	}
	wRef, wok := d.writer.source(w.ParentFile().Path())
	rRef, rok := d.reader.source(r.ParentFile().Path())
	if wok && rok && wRef.Subject == rRef.Subject && wRef.Version == rRef.Version {
		return // the same file, or both local: compared with the scope's types
	}
	key := [2]protoreflect.MessageDescriptor{w, r}
	sub, done := d.memo[key]
	if !done {
		sd := &protobufDiffer{writer: d.writer, reader: d.reader, active: d.active, memo: d.memo}
		sd.message(w, r)
		sub = sd.changes
		d.memo[key] = sub
	}
	d.changes = append(d.changes, sub...)
	for _, c := range sub {
		if !protobufCompatibleChanges[c.Rule] {
			d.add(protobufFieldNamedTypeChanged, path, "the type %s changed incompatibly (%s at %s)", r.FullName(), c.Rule, c.Path)
			return
		}
	}
}

// protobufLocalName is a type's full name without its file's package.
func protobufLocalName(md protoreflect.MessageDescriptor) string {
	name := string(md.FullName())
	if pkg := string(md.ParentFile().Package()); pkg != "" {
		name = strings.TrimPrefix(name, pkg+".")
	}
	return name
}

// source tells which registered schema a file of s comes from: the zero
// Reference for the schema's own file, its reference for an imported one,
// ok false for a google/protobuf import.
func (s *protobufSchema) source(path string) (schema.Reference, bool) {
	if path == s.file.Path() {
		return schema.Reference{}, true
	}
	ref, ok := s.refs[path]
	return ref, ok
}
