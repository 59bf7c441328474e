package protofmt

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// protobufCanonical prints a compiled file back as .proto text: the
// registry's identity for the schema, and a text that compiles to the same
// descriptor. It keeps what the descriptor keeps and nothing else:
//
//   - comments and layout are gone; every element sits on its own line,
//     indented by two spaces;
//   - type names are fully qualified with a leading dot (.shop.Order), so
//     "Status", "Order.Status" and ".shop.Order.Status" print the same;
//   - imports are sorted; options are printed in field-number order, custom
//     ones as (.full.name) with message values as { text format };
//   - declaration order is kept within each kind (messages, enums, fields,
//     enum values): it is meaningful (message indexes, oneof layout), and
//     top-level kinds are printed as messages, enums, extensions, services;
//   - a json_name equal to the default one is dropped; numbers are decimal,
//     ranges are written out (no "max"), strings use octal escapes for
//     anything outside printable ASCII.
func protobufCanonical(fd protoreflect.FileDescriptor) string {
	p := &protobufPrinter{syntax: fd.Syntax()}
	switch fd.Syntax() {
	case protoreflect.Proto2:
		p.line(`syntax = "proto2";`)
	case protoreflect.Proto3:
		p.line(`syntax = "proto3";`)
	default:
		p.line(`edition = "` + protobufEdition(fd) + `";`)
	}
	if fd.Package() != "" {
		p.line("package " + string(fd.Package()) + ";")
	}
	imports := fd.Imports()
	lines := make([]string, 0, imports.Len())
	for i := 0; i < imports.Len(); i++ {
		imp := imports.Get(i)
		// protobuf-go dropped weak imports (they are plain ones to it), so
		// the canonical form has none.
		kind := ""
		if imp.IsPublic {
			kind = "public "
		}
		lines = append(lines, "import "+kind+protobufQuote(imp.Path())+";")
	}
	sort.Strings(lines)
	for _, l := range lines {
		p.line(l)
	}
	p.options(fd.Options())
	p.scope(fd.Messages(), fd.Enums(), fd.Extensions(), nil)
	services := fd.Services()
	for i := 0; i < services.Len(); i++ {
		p.service(services.Get(i))
	}
	return p.b.String()
}

func protobufEdition(fd protoreflect.FileDescriptor) string {
	var fdp *descriptorpb.FileDescriptorProto
	if r, ok := fd.(interface {
		FileDescriptorProto() *descriptorpb.FileDescriptorProto
	}); ok {
		fdp = r.FileDescriptorProto()
	} else {
		fdp = protodesc.ToFileDescriptorProto(fd)
	}
	return strings.TrimPrefix(fdp.GetEdition().String(), "EDITION_")
}

type protobufPrinter struct {
	b      strings.Builder
	depth  int
	syntax protoreflect.Syntax
}

func (p *protobufPrinter) line(s string) {
	for i := 0; i < p.depth; i++ {
		p.b.WriteString("  ")
	}
	p.b.WriteString(s)
	p.b.WriteByte('\n')
}

func (p *protobufPrinter) open(s string) {
	p.line(s + " {")
	p.depth++
}

func (p *protobufPrinter) close() {
	p.depth--
	p.line("}")
}

// scope prints the types and extensions declared in a file or a message.
// Group bodies are printed inline with their group field, so they are left
// out of the nested messages.
func (p *protobufPrinter) scope(msgs protoreflect.MessageDescriptors, enums protoreflect.EnumDescriptors,
	exts protoreflect.ExtensionDescriptors, fields protoreflect.FieldDescriptors) {
	groups := make(map[protoreflect.FullName]bool)
	for _, list := range []interface {
		Len() int
		Get(int) protoreflect.FieldDescriptor
	}{fields, exts} {
		if list == nil {
			continue
		}
		for i := 0; i < list.Len(); i++ {
			if f := list.Get(i); p.isGroup(f) {
				groups[f.Message().FullName()] = true
			}
		}
	}
	for i := 0; i < msgs.Len(); i++ {
		md := msgs.Get(i)
		if md.IsMapEntry() || groups[md.FullName()] {
			continue
		}
		p.open("message " + string(md.Name()))
		p.messageBody(md)
		p.close()
	}
	for i := 0; i < enums.Len(); i++ {
		p.enum(enums.Get(i))
	}
	for i := 0; i < exts.Len(); i++ {
		xd := exts.Get(i)
		p.open("extend ." + string(xd.ContainingMessage().FullName()))
		p.field(xd, false)
		p.close()
	}
}

// isGroup tells a proto2 group field, printed with the group syntax; in
// editions a delimited field is an ordinary field with a feature option.
func (p *protobufPrinter) isGroup(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.GroupKind && p.syntax == protoreflect.Proto2 &&
		fd.Message() != nil && fd.Message().Parent() == fd.Parent()
}

func (p *protobufPrinter) messageBody(md protoreflect.MessageDescriptor) {
	p.options(md.Options())
	fields := md.Fields()
	printed := make(map[protoreflect.OneofDescriptor]bool)
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		od := fd.ContainingOneof()
		if od == nil || od.IsSynthetic() {
			p.field(fd, false)
			continue
		}
		if printed[od] {
			continue
		}
		printed[od] = true
		p.open("oneof " + string(od.Name()))
		p.options(od.Options())
		members := od.Fields()
		for j := 0; j < members.Len(); j++ {
			p.field(members.Get(j), true)
		}
		p.close()
	}
	p.scope(md.Messages(), md.Enums(), md.Extensions(), fields)
	ranges := md.ExtensionRanges()
	for i := 0; i < ranges.Len(); i++ {
		r := ranges.Get(i)
		p.line("extensions " + protobufRange(int64(r[0]), int64(r[1])-1) +
			p.fieldOptions(nil, md.ExtensionRangeOptions(i)) + ";")
	}
	p.reserved(md.ReservedRanges().Len(), func(i int) (int64, int64) {
		r := md.ReservedRanges().Get(i)
		return int64(r[0]), int64(r[1]) - 1
	}, md.ReservedNames())
}

func (p *protobufPrinter) reserved(n int, get func(int) (int64, int64), names protoreflect.Names) {
	if n > 0 {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = protobufRange(get(i))
		}
		p.line("reserved " + strings.Join(parts, ", ") + ";")
	}
	if names.Len() > 0 {
		parts := make([]string, names.Len())
		for i := range parts {
			if p.syntax == protoreflect.Editions {
				parts[i] = string(names.Get(i))
			} else {
				parts[i] = protobufQuote(string(names.Get(i)))
			}
		}
		p.line("reserved " + strings.Join(parts, ", ") + ";")
	}
}

func protobufRange(start, end int64) string {
	if start == end {
		return strconv.FormatInt(start, 10)
	}
	return strconv.FormatInt(start, 10) + " to " + strconv.FormatInt(end, 10)
}

func (p *protobufPrinter) field(fd protoreflect.FieldDescriptor, inOneof bool) {
	var s strings.Builder
	if label := p.label(fd, inOneof); label != "" {
		s.WriteString(label + " ")
	}
	group := p.isGroup(fd)
	switch {
	case group:
		s.WriteString("group " + string(fd.Message().Name()))
	case fd.IsMap():
		s.WriteString("map<" + protobufTypeName(fd.MapKey()) + ", " + protobufTypeName(fd.MapValue()) + "> " + string(fd.Name()))
	default:
		s.WriteString(protobufTypeName(fd) + " " + string(fd.Name()))
	}
	s.WriteString(" = " + strconv.Itoa(int(fd.Number())))
	s.WriteString(p.fieldOptions(fd, fd.Options()))
	if !group {
		p.line(s.String() + ";")
		return
	}
	p.open(s.String())
	p.messageBody(fd.Message())
	p.close()
}

func (p *protobufPrinter) label(fd protoreflect.FieldDescriptor, inOneof bool) string {
	switch {
	case fd.IsMap() || inOneof:
		return ""
	case fd.Cardinality() == protoreflect.Repeated:
		return "repeated"
	case p.syntax == protoreflect.Proto2 && fd.Cardinality() == protoreflect.Required:
		return "required"
	case p.syntax == protoreflect.Proto2 || (p.syntax == protoreflect.Proto3 && fd.HasOptionalKeyword()):
		return "optional"
	}
	return ""
}

// protobufTypeName is a field's type as .proto text spells it: a scalar
// keyword or a fully qualified message or enum name.
func protobufTypeName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return "." + string(fd.Message().FullName())
	case protoreflect.EnumKind:
		return "." + string(fd.Enum().FullName())
	}
	return fd.Kind().String()
}

// fieldOptions prints the bracketed options of a field, enum value or
// extension range: default and json_name first (they are descriptor
// fields, not options), then the options message.
func (p *protobufPrinter) fieldOptions(fd protoreflect.FieldDescriptor, opts proto.Message) string {
	var parts []string
	if fd != nil && fd.HasDefault() {
		parts = append(parts, "default = "+protobufDefault(fd))
	}
	if fd != nil && !fd.IsExtension() && fd.JSONName() != protobufJSONName(string(fd.Name())) {
		parts = append(parts, "json_name = "+protobufQuote(fd.JSONName()))
	}
	protobufRangeOptions(opts, func(name string, v string) {
		parts = append(parts, name+" = "+v)
	})
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

// options prints the option statements of a file, message, oneof, enum,
// service or method.
func (p *protobufPrinter) options(opts proto.Message) {
	protobufRangeOptions(opts, func(name string, v string) {
		p.line("option " + name + " = " + v + ";")
	})
}

// protobufRangeOptions calls fn for each option set in opts, in field
// number order, with the option's name and value as .proto text; a repeated
// option gives one call per element.
func protobufRangeOptions(opts proto.Message, fn func(name, value string)) {
	if opts == nil {
		return
	}
	m := opts.ProtoReflect()
	if !m.IsValid() {
		return
	}
	for _, f := range protobufSetFields(m) {
		if f.fd.Number() == 999 { // uninterpreted_option: empty once compiled
			continue
		}
		name := string(f.fd.Name())
		if f.fd.IsExtension() {
			name = "(." + string(f.fd.FullName()) + ")"
		}
		if f.fd.IsList() {
			l := f.v.List()
			for i := 0; i < l.Len(); i++ {
				fn(name, protobufValue(f.fd, l.Get(i)))
			}
			continue
		}
		if f.fd.IsMap() {
			fn(name, protobufValue(f.fd, f.v)) // printed as a list of entries
			continue
		}
		fn(name, protobufValue(f.fd, f.v))
	}
}

type protobufSetField struct {
	fd protoreflect.FieldDescriptor
	v  protoreflect.Value
}

func protobufSetFields(m protoreflect.Message) []protobufSetField {
	var out []protobufSetField
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		out = append(out, protobufSetField{fd, v})
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].fd.Number() < out[j].fd.Number() })
	return out
}

// protobufValue prints one value: a literal, or { text format } for a
// message.
func protobufValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	if fd.IsMap() {
		var b strings.Builder
		b.WriteString("[")
		for i, e := range protobufMapEntries(fd, v.Map()) {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e)
		}
		b.WriteString("]")
		return b.String()
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		var b strings.Builder
		protobufTextMessage(&b, v.Message())
		return b.String()
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.FormatInt(int64(v.Enum()), 10)
	case protoreflect.StringKind:
		return protobufQuote(v.String())
	case protoreflect.BytesKind:
		return protobufQuote(string(v.Bytes()))
	case protoreflect.FloatKind:
		return protobufFloat(v.Float(), 32)
	case protoreflect.DoubleKind:
		return protobufFloat(v.Float(), 64)
	}
	return v.String() // bool and integers
}

func protobufMapEntries(fd protoreflect.FieldDescriptor, m protoreflect.Map) []string {
	type entry struct {
		k protoreflect.MapKey
		s string
	}
	var entries []entry
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		s := "{ key: " + protobufValue(fd.MapKey(), k.Value()) + " value: " + protobufValue(fd.MapValue(), v) + " }"
		entries = append(entries, entry{k, s})
		return true
	})
	sort.Slice(entries, func(i, j int) bool { return entries[i].s < entries[j].s })
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.s
	}
	return out
}

// protobufTextMessage prints a message in the text format, fields in
// number order, as an option value (a message literal).
func protobufTextMessage(b *strings.Builder, m protoreflect.Message) {
	b.WriteString("{")
	for _, f := range protobufSetFields(m) {
		name := f.fd.TextName()
		if f.fd.IsExtension() {
			name = "[" + string(f.fd.FullName()) + "]"
		}
		if f.fd.IsList() {
			l := f.v.List()
			for i := 0; i < l.Len(); i++ {
				b.WriteString(" " + name + ": " + protobufValue(f.fd, l.Get(i)))
			}
			continue
		}
		if f.fd.IsMap() {
			for _, e := range protobufMapEntries(f.fd, f.v.Map()) {
				b.WriteString(" " + name + ": " + e)
			}
			continue
		}
		b.WriteString(" " + name + ": " + protobufValue(f.fd, f.v))
	}
	b.WriteString(" }")
}

func protobufDefault(fd protoreflect.FieldDescriptor) string {
	if fd.Kind() == protoreflect.EnumKind {
		if ev := fd.DefaultEnumValue(); ev != nil {
			return string(ev.Name())
		}
	}
	return protobufValue(fd, fd.Default())
}

func protobufFloat(f float64, bits int) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', -1, bits)
}

// protobufQuote writes a string or bytes literal; anything outside
// printable ASCII is an octal escape, so the text is plain ASCII and
// round-trips byte for byte.
func protobufQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			b.WriteByte('\\')
			b.WriteByte('0' + c>>6)
			b.WriteByte('0' + (c>>3)&7)
			b.WriteByte('0' + c&7)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// protobufJSONName is the JSON name protoc gives a field that sets none:
// underscores dropped, the letter after one upper-cased.
func protobufJSONName(name string) string {
	var b strings.Builder
	upper := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '_' {
			upper = true
			continue
		}
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		upper = false
		b.WriteByte(c)
	}
	return b.String()
}

func (p *protobufPrinter) enum(ed protoreflect.EnumDescriptor) {
	p.open("enum " + string(ed.Name()))
	p.options(ed.Options())
	values := ed.Values()
	for i := 0; i < values.Len(); i++ {
		v := values.Get(i)
		p.line(string(v.Name()) + " = " + strconv.FormatInt(int64(v.Number()), 10) + p.fieldOptions(nil, v.Options()) + ";")
	}
	p.reserved(ed.ReservedRanges().Len(), func(i int) (int64, int64) {
		r := ed.ReservedRanges().Get(i)
		return int64(r[0]), int64(r[1])
	}, ed.ReservedNames())
	p.close()
}

func (p *protobufPrinter) service(sd protoreflect.ServiceDescriptor) {
	p.open("service " + string(sd.Name()))
	p.options(sd.Options())
	methods := sd.Methods()
	for i := 0; i < methods.Len(); i++ {
		m := methods.Get(i)
		in, out := "", ""
		if m.IsStreamingClient() {
			in = "stream "
		}
		if m.IsStreamingServer() {
			out = "stream "
		}
		sig := "rpc " + string(m.Name()) + "(" + in + "." + string(m.Input().FullName()) + ") returns (" +
			out + "." + string(m.Output().FullName()) + ")"
		var opts []string
		protobufRangeOptions(m.Options(), func(name, value string) {
			opts = append(opts, "option "+name+" = "+value+";")
		})
		if len(opts) == 0 {
			p.line(sig + ";")
			continue
		}
		p.open(sig)
		for _, o := range opts {
			p.line(o)
		}
		p.close()
	}
	p.close()
}
