package protofmt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/semaq/semaq/internal/schema"
)

// protobufInferenceProto is the schema most tests validate against. The map
// field comes before the nested Message on purpose: its synthetic entry
// type must not count in message indexes.
const protobufInferenceProto = `
syntax = "proto2";
package inference.v1;

message Request {
  required string model = 1;
  map<string, Message> named = 5;
  repeated Message messages = 2;
  optional int32 max_tokens = 3;
  optional float temperature = 4;
  extensions 100 to 199;

  message Message {
    required string role = 1;
    optional string content = 2;
  }
}

message Response {
  optional string text = 1;
  message Usage {
    optional int32 tokens = 1;
  }
}

extend Request {
  optional string trace_id = 100;
}
`

func protobufTestParse(t testing.TB, text string) *protobufSchema {
	t.Helper()
	s, err := protobufFormat{}.Parse(text, nil, nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s.(*protobufSchema)
}

// protobufTestPayload builds a payload: the message-index prefix for
// message, then the message given in text format.
func protobufTestPayload(t testing.TB, s *protobufSchema, message, text string) []byte {
	t.Helper()
	prefix, err := schema.ProtobufMessageIndexes(s, message)
	if err != nil {
		t.Fatalf("ProtobufMessageIndexes(%s): %v", message, err)
	}
	md := protobufTestDescriptor(t, s, message)
	msg := dynamicpb.NewMessage(md)
	opts := prototext.UnmarshalOptions{AllowPartial: true, Resolver: s.types}
	if err := opts.Unmarshal([]byte(text), msg); err != nil {
		t.Fatalf("text %q: %v", text, err)
	}
	body, err := proto.MarshalOptions{AllowPartial: true, Deterministic: true}.Marshal(msg)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return append(prefix, body...)
}

func protobufTestDescriptor(t testing.TB, s *protobufSchema, name string) protoreflect.MessageDescriptor {
	t.Helper()
	mt, err := s.types.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		t.Fatalf("no message %s: %v", name, err)
	}
	return mt.Descriptor()
}

func TestProtobufRegistered(t *testing.T) {
	t.Parallel()
	fs := &schema.Formats{}
	fs.Register(New())
	for _, name := range []schema.Type{"PROTOBUF", "protobuf"} {
		f, err := fs.Get(name)
		if err != nil {
			t.Fatalf("Get(%q): %v", name, err)
		}
		if f.Type() != schema.TypeProtobuf {
			t.Fatalf("Get(%q).Type() = %s", name, f.Type())
		}
	}
}

func TestProtobufParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		text string
		want []string // substrings of the error
	}{
		{"syntax error with position", "syntax = \"proto3\";\nmessage A {\n  int32 x = 1\n}\n",
			[]string{"schema.proto:4:1", "syntax error"}},
		{"every unknown type reported", "syntax = \"proto3\";\nmessage A {\n  Foo x = 1;\n  Bar y = 2;\n}\n",
			[]string{"schema.proto:3:3", "unknown type Foo", "schema.proto:4:3", "unknown type Bar"}},
		{"import without reference", "syntax = \"proto3\";\nimport \"common/money.proto\";\nmessage A {}\n",
			[]string{"schema.proto:2:8", `"common/money.proto"`}},
		{"duplicate field number", "syntax = \"proto3\";\nmessage A {\n  int32 x = 1;\n  int32 y = 1;\n}\n",
			[]string{"schema.proto:4:13", "same tag 1"}},
		{"bad syntax version", `syntax = "proto4";`, []string{"schema.proto:1:10", "proto2"}},
		{"proto3 required", "syntax = \"proto3\";\nmessage A { required int32 x = 1; }", []string{"schema.proto:2:"}},
		{"not protobuf at all", `{"type": "record"}`, []string{"schema.proto:1:1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := protobufFormat{}.Parse(tc.text, nil, nil)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// protobufTestRegistry is a Resolver over a map of import path → text, that
// counts calls.
type protobufTestRegistry struct {
	files map[string]string
	refs  map[string][]schema.Reference
	typ   schema.Type
	calls int
}

func (r *protobufTestRegistry) resolve(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
	r.calls++
	text, ok := r.files[ref.Name]
	if !ok {
		return "", "", nil, fmt.Errorf("subject %s: %w", ref.Subject, errProtobufTestNotFound)
	}
	typ := r.typ
	if typ == "" {
		typ = schema.TypeProtobuf
	}
	return text, typ, r.refs[ref.Name], nil
}

var errProtobufTestNotFound = errors.New("not found")

func TestProtobufParseReferences(t *testing.T) {
	t.Parallel()
	reg := &protobufTestRegistry{
		files: map[string]string{
			"common/money.proto": `syntax = "proto3"; package common; message Money { string currency = 1; int64 units = 2; }`,
			"shop/line.proto": `syntax = "proto3"; package shop; import "common/money.proto";
				message Line { string sku = 1; common.Money price = 2; }`,
		},
		refs: map[string][]schema.Reference{
			"shop/line.proto": {{Name: "common/money.proto", Subject: "money", Version: 1}},
		},
	}
	main := `syntax = "proto3";
package shop;
import "shop/line.proto";
import "google/protobuf/timestamp.proto";
message Order {
  repeated Line lines = 1;
  google.protobuf.Timestamp at = 2;
}`
	refs := []schema.Reference{{Name: "shop/line.proto", Subject: "line", Version: 3}}

	t.Run("transitive", func(t *testing.T) {
		s, err := protobufFormat{}.Parse(main, refs, reg.resolve)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		ps := s.(*protobufSchema)
		if got := ps.refs["common/money.proto"]; got.Subject != "money" {
			t.Errorf("transitive reference not recorded: %+v", ps.refs)
		}
		payload := protobufTestPayload(t, ps, "shop.Order",
			`lines { sku: "a-1" price { currency: "EUR" units: 12 } } at { seconds: 1700000000 }`)
		if err := s.Validate(payload); err != nil {
			t.Errorf("Validate: %v", err)
		}
	})

	errCases := []struct {
		name    string
		refs    []schema.Reference
		resolve schema.Resolver
		want    string
		is      error
	}{
		{"no resolver", refs, nil, "no resolver", nil},
		{"resolver fails", []schema.Reference{{Name: "shop/nope.proto", Subject: "nope", Version: 1}}, reg.resolve, `"shop/nope.proto"`, errProtobufTestNotFound},
		{"reference is not protobuf", refs, (&protobufTestRegistry{files: reg.files, typ: schema.TypeAvro}).resolve, "is a AVRO schema", nil},
		{"reference without name", []schema.Reference{{Subject: "line", Version: 1}}, reg.resolve, "has no name", nil},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := protobufFormat{}.Parse(main, tc.refs, tc.resolve)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("err = %v does not wrap %v", err, tc.is)
			}
		})
	}

	t.Run("import cycle ends", func(t *testing.T) {
		cyc := &protobufTestRegistry{
			files: map[string]string{
				"a.proto": `syntax = "proto3"; import "b.proto"; message A {}`,
				"b.proto": `syntax = "proto3"; import "a.proto"; message B {}`,
			},
			refs: map[string][]schema.Reference{
				"a.proto": {{Name: "b.proto", Subject: "b", Version: 1}},
				"b.proto": {{Name: "a.proto", Subject: "a", Version: 1}},
			},
		}
		_, err := protobufFormat{}.Parse(`syntax = "proto3"; import "a.proto"; message M {}`,
			[]schema.Reference{{Name: "a.proto", Subject: "a", Version: 1}}, cyc.resolve)
		if err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Fatalf("err = %v, want an import cycle", err)
		}
		if cyc.calls != 2 {
			t.Errorf("resolver called %d times, want 2", cyc.calls)
		}
	})

	t.Run("reference named like the main file", func(t *testing.T) {
		clash := &protobufTestRegistry{files: map[string]string{
			protobufMainFile: `syntax = "proto3"; package dep; message D {}`,
		}}
		s, err := protobufFormat{}.Parse(`syntax = "proto3"; import "schema.proto"; message M { dep.D d = 1; }`,
			[]schema.Reference{{Name: protobufMainFile, Subject: "dep", Version: 1}}, clash.resolve)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if !strings.Contains(s.Canonical(), "message M") {
			t.Errorf("canonical is not the main file:\n%s", s.Canonical())
		}
	})
}

func TestProtobufCanonical(t *testing.T) {
	t.Parallel()
	base := `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message Order {
  string id = 1;
  Status status = 2;
  google.protobuf.Timestamp at = 3;
  enum Status { NEW = 0; PAID = 1; }
}`
	same := map[string]string{
		"comments and layout": `// An order.
syntax="proto3";   package shop;
import "google/protobuf/timestamp.proto"; import "google/protobuf/duration.proto";
/* the order */ message Order{string id=1;Status status=2;// trailing
google.protobuf.Timestamp at=3; enum Status{NEW=0;PAID=1;}}`,
		"qualified names": `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message Order {
  string id = 1;
  .shop.Order.Status status = 2;
  .google.protobuf.Timestamp at = 3;
  enum Status { NEW = 0; PAID = 1; }
}`,
		"import order": `syntax = "proto3";
package shop;
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  Order.Status status = 2;
  google.protobuf.Timestamp at = 3;
  enum Status { NEW = 0; PAID = 1; }
}`,
		"default json_name spelled out": `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
message Order {
  string id = 1 [json_name = "id"];
  Status status = 2;
  google.protobuf.Timestamp at = 3;
  enum Status { NEW = 0; PAID = 1; }
}`,
		// protobuf-go no longer supports weak imports: one is a plain import.
		"weak import": strings.Replace(base, `import "google/protobuf/duration.proto"`, `import weak "google/protobuf/duration.proto"`, 1),
	}
	different := map[string]string{
		"field number": strings.Replace(base, "string id = 1", "string id = 4", 1),
		"field order":  strings.Replace(base, "string id = 1;\n  Status status = 2;", "Status status = 2;\n  string id = 1;", 1),
		"package":      strings.Replace(base, "package shop;", "package store;", 1),
		"json_name":    strings.Replace(base, "string id = 1", `string id = 1 [json_name = "ID"]`, 1),
		"option":       strings.Replace(base, "string id = 1", `string id = 1 [deprecated = true]`, 1),
	}
	want := protobufTestParse(t, base).Canonical()
	for name, text := range same {
		if got := protobufTestParse(t, text).Canonical(); got != want {
			t.Errorf("%s: canonical differs:\n%s\nwant:\n%s", name, got, want)
		}
	}
	for name, text := range different {
		if got := protobufTestParse(t, text).Canonical(); got == want {
			t.Errorf("%s: canonical is the same, want a different one", name)
		}
	}
}

// TestProtobufCanonicalRoundTrip prints files that use most of the
// language and checks the printed text compiles to the same descriptor
// (its canonical form is itself).
func TestProtobufCanonicalRoundTrip(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"proto2 everything": `syntax = "proto2";
package shop.v1;
import "google/protobuf/descriptor.proto";
import public "google/protobuf/timestamp.proto";
option java_package = "com.shop";
option optimize_for = SPEED;
extend google.protobuf.MessageOptions { optional int32 level = 50000; optional Agg agg = 50001; repeated string tags = 50002; }
extend google.protobuf.FieldOptions { optional float weight = 50003; optional bytes blob = 50004; }
extend google.protobuf.OneofOptions { optional bool exclusive = 50005; }
message Agg { optional string s = 1; repeated int32 r = 2; optional Agg child = 3; map<string, int32> m = 4; optional Kind k = 5; }
enum Kind { option allow_alias = true; A = 0; B = 1; ALIAS_B = 1 [deprecated = true]; reserved 5 to 9, 100; reserved "OLD"; }
message M {
  option (level) = 5;
  option (agg) = { s: "x\n\"\303\251" r: 1 r: 2 child { s: "y" } m { key: "a" value: 1 } k: A };
  option (tags) = "a"; option (tags) = "b";
  optional string name = 1 [default = "a\"b\\c", json_name = "zz"];
  map<string, Agg> m = 2;
  optional group G = 3 { optional int32 x = 1; }
  required double d = 4 [default = -inf, (weight) = nan, (blob) = "\001\377"];
  optional float f = 5 [default = 1.5e10];
  optional Kind kind = 6 [default = B];
  repeated int32 packed = 7 [packed = true, deprecated = true];
  oneof choice { option (exclusive) = true; string a = 8; int64 b = 9; group Gg = 10 { optional string q = 1; } }
  optional google.protobuf.Timestamp ts = 11;
  extensions 100 to 199, 1000 to max;
  reserved 20, 30 to 40;
  reserved "foo", "bar";
  message Inner { enum E { X = 0; } optional E e = 1; }
  extend M { optional Inner inner_ext = 150; }
  optional bytes raw = 12 [default = "\000\x01abc"];
  optional uint64 big = 13 [default = 18446744073709551615];
  optional sint32 neg = 14 [default = -5];
  optional bool flag = 15 [default = true];
}
extend M { optional group ExtG = 160 { optional int32 y = 1; } }
service Svc {
  option deprecated = true;
  rpc Get(M) returns (stream Agg);
  rpc Put(stream M) returns (M) { option idempotency_level = IDEMPOTENT; }
}`,
		"proto3": `syntax = "proto3";
message A {
  optional string x = 1;
  repeated int32 y = 2 [packed = false];
  map<int32, A> z = 3;
  oneof o { string p = 4; A q = 5; }
  string snake_case_name = 6;
  reserved 7, 9 to 11;
  reserved "gone";
}
enum E { E_UNSPECIFIED = 0; E_ONE = 1; }`,
		"editions": `edition = "2023";
package ed;
option features.field_presence = IMPLICIT;
message E {
  int32 a = 1 [features.field_presence = EXPLICIT];
  E child = 2 [features.message_encoding = DELIMITED];
  reserved foo;
}`,
	}
	for name, text := range files {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := protobufTestParse(t, text)
			if _, native := s.types.(*dynamicpb.Types); !native {
				t.Errorf("descriptors were not rebuilt with protodesc (types %T)", s.types)
			}
			again := protobufTestParse(t, s.Canonical())
			if again.Canonical() != s.Canonical() {
				t.Fatalf("canonical text does not reprint the same:\n%s\nthen:\n%s", s.Canonical(), again.Canonical())
			}
			if diff := protobufDiff(s, again); len(diff) != 0 {
				t.Errorf("reparsed canonical differs from the original: %v", diff)
			}
		})
	}
}

func TestProtobufValidate(t *testing.T) {
	t.Parallel()
	s := protobufTestParse(t, protobufInferenceProto)
	if _, native := s.types.(*dynamicpb.Types); !native {
		t.Errorf("descriptors were not rebuilt with protodesc (types %T)", s.types)
	}
	request := protobufTestPayload(t, s, "inference.v1.Request",
		`model: "m" messages { role: "user" content: "hi" } max_tokens: 5 [inference.v1.trace_id]: "t-1"`)
	body := request[1:] // the message without its one-byte index list
	prefixed := func(prefix []byte, b ...[]byte) []byte {
		out := append([]byte(nil), prefix...)
		for _, p := range b {
			out = append(out, p...)
		}
		return out
	}
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }

	ok := map[string][]byte{
		"first message, one-byte index":  request,
		"first message, long index form": prefixed([]byte{2, 0}, body),
		"nested message": protobufTestPayload(t, s, "inference.v1.Request.Message",
			`role: "assistant"`),
		"second top-level message": protobufTestPayload(t, s, "inference.v1.Response.Usage", `tokens: 3`),
		"map of messages": protobufTestPayload(t, s, "inference.v1.Request",
			`model: "m" named { key: "sys" value { role: "system" } }`),
		"unknown field number kept": prefixed([]byte{0}, body, protowire.AppendVarint(tag(99, protowire.VarintType), 7)),
	}
	for name, payload := range ok {
		if err := s.Validate(payload); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}

	bad := []struct {
		name    string
		payload []byte
		rule    string
		path    string
	}{
		{"empty payload", nil, "message-index", ""},
		{"negative count", []byte{1}, "message-index", ""},
		{"count beyond payload", []byte{8, 0}, "message-index", ""},
		{"top-level index out of range", prefixed([]byte{2, 4}, body), "message-index", ""},
		{"negative index", prefixed([]byte{2, 1}, body), "message-index", ""},
		// Request has one nested message: its map entry does not count.
		{"nested index out of range", prefixed([]byte{4, 0, 2}, body), "message-index", ""},
		{"truncated length", prefixed([]byte{0}, tag(1, protowire.BytesType), []byte{5, 'm'}), "decode", "inference.v1.Request"},
		{"end group without start", prefixed([]byte{0}, tag(1, protowire.EndGroupType)), "decode", "inference.v1.Request"},
		{"required top-level field", protobufTestPayload(t, s, "inference.v1.Request", `max_tokens: 1`), "required", "model"},
		{"required in list element", protobufTestPayload(t, s, "inference.v1.Request",
			`model: "m" messages { role: "user" } messages { content: "x" }`), "required", "messages[1].role"},
		{"required in map value", protobufTestPayload(t, s, "inference.v1.Request",
			`model: "m" named { key: "sys" value { content: "x" } }`), "required", `named["sys"].role`},
		{"wire type contradicts declaration", prefixed([]byte{0}, body,
			protowire.AppendBytes(tag(3, protowire.BytesType), []byte("five"))), "wire-type", "max_tokens"},
		{"wire type wrong in nested message", prefixed([]byte{0}, protowire.AppendString(tag(1, protowire.BytesType), "m"),
			protowire.AppendBytes(tag(2, protowire.BytesType),
				protowire.AppendVarint(prefixed(protowire.AppendString(tag(1, protowire.BytesType), "user"), tag(2, protowire.VarintType)), 1))),
			"wire-type", "messages[0].content"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Validate(tc.payload)
			var verr *schema.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate = %v, want a *ValidationError", err)
			}
			if !errors.Is(err, schema.ErrInvalidPayload) {
				t.Errorf("error does not match ErrInvalidPayload")
			}
			if verr.Rule != tc.rule || verr.Path != tc.path {
				t.Errorf("got rule %q path %q (%v), want rule %q path %q", verr.Rule, verr.Path, err, tc.rule, tc.path)
			}
		})
	}

	t.Run("proto3 string must be UTF-8", func(t *testing.T) {
		s3 := protobufTestParse(t, `syntax = "proto3"; message A { string s = 1; bytes b = 2; }`)
		if err := s3.Validate(prefixed([]byte{0}, protowire.AppendBytes(tag(2, protowire.BytesType), []byte{0xff}))); err != nil {
			t.Errorf("bytes field: %v", err)
		}
		err := s3.Validate(prefixed([]byte{0}, protowire.AppendBytes(tag(1, protowire.BytesType), []byte{0xff})))
		var verr *schema.ValidationError
		if !errors.As(err, &verr) || verr.Rule != "decode" {
			t.Errorf("invalid UTF-8: got %v, want a decode error", err)
		}
	})

	t.Run("schema without messages", func(t *testing.T) {
		empty := protobufTestParse(t, `syntax = "proto3"; enum E { E0 = 0; }`)
		var verr *schema.ValidationError
		if err := empty.Validate([]byte{0}); !errors.As(err, &verr) || verr.Rule != "message-index" {
			t.Errorf("got %v, want a message-index error", err)
		}
	})
}

// protobufOtherSchema is a Schema of another format.
type protobufOtherSchema struct{}

func (protobufOtherSchema) Type() schema.Type       { return schema.TypeAvro }
func (protobufOtherSchema) Canonical() string       { return `"int"` }
func (protobufOtherSchema) Validate(b []byte) error { return nil }

func TestProtobufMessageIndexes(t *testing.T) {
	t.Parallel()
	s := protobufTestParse(t, protobufInferenceProto)
	cases := []struct {
		name string
		want []byte
	}{
		{"inference.v1.Request", []byte{0}},
		{".inference.v1.Request", []byte{0}},
		{"inference.v1.Request.Message", []byte{4, 0, 0}}, // [0, 0]: the map entry is skipped
		{"inference.v1.Response", []byte{2, 2}},           // [1]
		{"inference.v1.Response.Usage", []byte{4, 2, 0}},  // [1, 0]
	}
	for _, tc := range cases {
		got, err := schema.ProtobufMessageIndexes(s, tc.name)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if string(got) != string(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
		md, n, err := protobufDecodeIndexes(s.file, got)
		if err != nil || n != len(got) || md.FullName() != protoreflect.FullName(strings.TrimPrefix(tc.name, ".")) {
			t.Errorf("%s: decoding %v gives %v after %d bytes (%v)", tc.name, got, md.FullName(), n, err)
		}
	}
	for _, name := range []string{"inference.v1.Nope", "Request", "inference.v1.Request.NamedEntry", "inference.v1"} {
		if _, err := schema.ProtobufMessageIndexes(s, name); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := schema.ProtobufMessageIndexes(protobufOtherSchema{}, "A"); err == nil {
		t.Error("an Avro schema: no error")
	}
}

// BenchmarkProtobufValidate validates a ~300-byte inference request.
func BenchmarkProtobufValidate(b *testing.B) {
	s := protobufTestParse(b, `syntax = "proto3";
package inference.v1;
message Request {
  string model = 1;
  repeated Message messages = 2;
  int32 max_tokens = 3;
  float temperature = 4;
  message Message {
    string role = 1;
    string content = 2;
  }
}`)
	payload := protobufTestPayload(b, s, "inference.v1.Request", `model: "llama-3.1-70b-instruct"
messages { role: "system" content: "You are a concise assistant. Answer in one short paragraph and cite sources." }
messages { role: "user" content: "Summarise the trade-offs between at-least-once and exactly-once delivery in brokers." }
messages { role: "assistant" content: "At-least-once is cheaper; exactly-once needs dedup state." }
max_tokens: 512 temperature: 0.7`)
	if n := len(payload); n < 280 || n > 340 {
		b.Fatalf("payload is %d bytes, want about 300", n)
	}
	if err := s.Validate(payload); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Validate(payload); err != nil {
			b.Fatal(err)
		}
	}
}
