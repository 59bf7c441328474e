package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/semaq/semaq/internal/schema"
)

// A sample payload for Avro or Protobuf is written in JSON and encoded here
// into the binary the serializers send, so a user can write one by hand.
// The registry's own validator then checks the result: the encoders need
// not be strict, only correct for what they accept.

// avroEncoder returns a function that encodes a datum of the Avro schema
// text, given in Avro's JSON encoding, into Avro binary.
func avroEncoder(text string) (func([]byte) ([]byte, error), error) {
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, err
	}
	return func(doc []byte) ([]byte, error) {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		return avroAppend(nil, s, v, "")
	}, nil
}

// avroAppend appends the binary encoding of v, decoded from JSON with
// UseNumber (or a field default as hamba/avro holds it), as a datum of s.
// path is v's JSON pointer, for errors.
func avroAppend(buf []byte, s avro.Schema, v any, path string) ([]byte, error) {
	fail := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("at %s: %s", nameOr(path, "/"), fmt.Sprintf(format, args...))
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return avroAppend(buf, s.Schema(), v, path)
	case *avro.RecordSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return fail("record %s needs a JSON object, not %s", s.FullName(), jsonKind(v))
		}
		known := make(map[string]bool, len(s.Fields()))
		for _, f := range s.Fields() {
			known[f.Name()] = true
			fv, ok := m[f.Name()]
			if !ok {
				if !f.HasDefault() {
					return fail("record %s lacks field %q, which has no default", s.FullName(), f.Name())
				}
				fv = f.Default()
			}
			var err error
			if buf, err = avroAppend(buf, f.Type(), fv, path+"/"+f.Name()); err != nil {
				return nil, err
			}
		}
		for k := range m {
			if !known[k] {
				return fail("record %s has no field %q", s.FullName(), k)
			}
		}
		return buf, nil
	case *avro.EnumSchema:
		sym, _ := v.(string)
		i := slices.Index(s.Symbols(), sym)
		if i < 0 {
			return fail("%s is not a symbol of enum %s (%s)", jsonText(v), s.FullName(), strings.Join(s.Symbols(), ", "))
		}
		return binary.AppendVarint(buf, int64(i)), nil
	case *avro.ArraySchema:
		items, ok := v.([]any)
		if !ok {
			return fail("an array needs a JSON array, not %s", jsonKind(v))
		}
		if len(items) > 0 {
			buf = binary.AppendVarint(buf, int64(len(items)))
		}
		for i, it := range items {
			var err error
			if buf, err = avroAppend(buf, s.Items(), it, fmt.Sprintf("%s/%d", path, i)); err != nil {
				return nil, err
			}
		}
		return binary.AppendVarint(buf, 0), nil
	case *avro.MapSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return fail("a map needs a JSON object, not %s", jsonKind(v))
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) > 0 {
			buf = binary.AppendVarint(buf, int64(len(keys)))
		}
		for _, k := range keys {
			buf = avroAppendBytes(buf, []byte(k))
			var err error
			if buf, err = avroAppend(buf, s.Values(), m[k], path+"/"+k); err != nil {
				return nil, err
			}
		}
		return binary.AppendVarint(buf, 0), nil
	case *avro.UnionSchema:
		return avroAppendUnion(buf, s, v, path)
	case *avro.FixedSchema:
		b, ok := avroByteString(v)
		if !ok || len(b) != s.Size() {
			return fail("fixed %s needs a string of %d bytes (code points 0-255)", s.FullName(), s.Size())
		}
		return append(buf, b...), nil
	case *avro.NullSchema:
		return avroAppendPrimitive(buf, avro.Null, v, fail)
	case *avro.PrimitiveSchema:
		return avroAppendPrimitive(buf, s.Type(), v, fail)
	}
	return fail("schema type %s is not supported", s.Type())
}

func avroAppendPrimitive(buf []byte, t avro.Type, v any, fail func(string, ...any) ([]byte, error)) ([]byte, error) {
	switch t {
	case avro.Null:
		if v != nil {
			return fail("null needs null, not %s", jsonKind(v))
		}
		return buf, nil
	case avro.Boolean:
		b, ok := v.(bool)
		if !ok {
			return fail("boolean needs true or false, not %s", jsonKind(v))
		}
		if b {
			return append(buf, 1), nil
		}
		return append(buf, 0), nil
	case avro.Int, avro.Long:
		n, ok := avroInteger(v)
		if !ok || t == avro.Int && (n < math.MinInt32 || n > math.MaxInt32) {
			return fail("%s needs an integer in its range, not %s", t, jsonText(v))
		}
		return binary.AppendVarint(buf, n), nil
	case avro.Float, avro.Double:
		f, ok := avroNumber(v)
		if !ok {
			return fail("%s needs a number, not %s", t, jsonKind(v))
		}
		if t == avro.Float {
			return binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(f))), nil
		}
		return binary.LittleEndian.AppendUint64(buf, math.Float64bits(f)), nil
	case avro.String:
		s, ok := v.(string)
		if !ok {
			return fail("string needs a JSON string, not %s", jsonKind(v))
		}
		return avroAppendBytes(buf, []byte(s)), nil
	case avro.Bytes:
		b, ok := avroByteString(v)
		if !ok {
			return fail("bytes needs a JSON string of code points 0-255, not %s", jsonKind(v))
		}
		return avroAppendBytes(buf, b), nil
	}
	return fail("schema type %s is not supported", t)
}

// avroAppendUnion writes a union value: null; Avro's JSON form, an object
// with one member named after the branch ({"string": "x"}); or, leniently,
// a bare value, in the first branch it encodes in.
func avroAppendUnion(buf []byte, s *avro.UnionSchema, v any, path string) ([]byte, error) {
	types := s.Types()
	if m, ok := v.(map[string]any); ok && len(m) == 1 {
		for name, inner := range m {
			for i, t := range types {
				if avroBranchName(t) == name || avroBranchShortName(t) == name {
					out, err := avroAppend(binary.AppendVarint(buf, int64(i)), t, inner, path+"/"+name)
					if err == nil {
						return out, nil
					}
					return nil, err
				}
			}
		}
	}
	var firstErr error
	for i, t := range types {
		out, err := avroAppend(binary.AppendVarint(slices.Clip(buf), int64(i)), t, v, path)
		if err == nil {
			return out, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = avroBranchName(t)
	}
	return nil, fmt.Errorf("at %s: %s fits no branch of union [%s] (first: %v)", nameOr(path, "/"), jsonText(v), strings.Join(names, ", "), firstErr)
}

// avroBranchName is how Avro's JSON encoding names a union branch.
func avroBranchName(s avro.Schema) string {
	switch s := s.(type) {
	case avro.NamedSchema:
		return s.FullName()
	case *avro.RefSchema:
		return s.Schema().FullName()
	}
	return string(s.Type())
}

func avroBranchShortName(s avro.Schema) string {
	name := avroBranchName(s)
	return name[strings.LastIndexByte(name, '.')+1:]
}

func avroAppendBytes(buf, b []byte) []byte {
	buf = binary.AppendVarint(buf, int64(len(b)))
	return append(buf, b...)
}

// avroByteString reads bytes as Avro's JSON encoding writes them: a string
// whose code points 0-255 are the bytes. Defaults may come as []byte.
func avroByteString(v any) ([]byte, bool) {
	switch v := v.(type) {
	case []byte:
		return v, true
	case string:
		out := make([]byte, 0, len(v))
		for _, r := range v {
			if r > 255 || r == utf8.RuneError {
				return nil, false
			}
			out = append(out, byte(r))
		}
		return out, true
	}
	return nil, false
}

func avroInteger(v any) (int64, bool) {
	switch v := v.(type) {
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case float64: // a default
		return int64(v), v == math.Trunc(v) && math.Abs(v) < 1<<63
	}
	return 0, false
}

func avroNumber(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int32:
		return float64(v), true
	case int64:
		return float64(v), true
	}
	return 0, false
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64, float32, int, int32, int64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// jsonText is a decoded value as JSON, shortened for an error message.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return jsonKind(v)
	}
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}

// protobufEncoder returns a function that encodes the first message type
// of the .proto file text, given in protojson, into what Confluent's
// serializer writes after the schema id: the message indexes ([0]: one
// zero byte) and the binary message, fields in number order.
func protobufEncoder(text string, compiled schema.Schema) (func([]byte) ([]byte, error), error) {
	const file = "schema.proto"
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{file: text}),
	})}
	files, err := c.Compile(context.Background(), file)
	if err != nil {
		return nil, err
	}
	msgs := files[0].Messages()
	if msgs.Len() == 0 {
		return nil, fmt.Errorf("the .proto file declares no message type")
	}
	md := msgs.Get(0)
	indexes, err := schema.ProtobufMessageIndexes(compiled, string(md.FullName()))
	if err != nil {
		return nil, err
	}
	return func(doc []byte) ([]byte, error) {
		return protobufEncode(md, indexes, doc)
	}, nil
}

func protobufEncode(md protoreflect.MessageDescriptor, indexes, doc []byte) ([]byte, error) {
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal(doc, m); err != nil {
		return nil, fmt.Errorf("not a %s in protojson: %v", md.FullName(), err)
	}
	return proto.MarshalOptions{Deterministic: true}.MarshalAppend(slices.Clone(indexes), m)
}
