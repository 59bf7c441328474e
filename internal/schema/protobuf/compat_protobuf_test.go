package protofmt

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// protobufTestDeps are referenced files by "import path@version", for the
// cases about imported types.
var protobufTestDeps = map[string]string{
	"geo/point.proto@1": `syntax = "proto3"; package geo; message Point { int32 x = 1; int32 y = 2; }`,
	"geo/point.proto@2": `syntax = "proto3"; package geo; message Point { int32 x = 1; int32 y = 2; int32 z = 3; }`,
	"geo/point.proto@3": `syntax = "proto3"; package geo; message Point { double x = 1; int32 y = 2; }`,
	"geo/point.proto@4": `syntax = "proto3"; package geo.v2; message Point { int32 x = 1; int32 y = 2; }`,
	"tree/node.proto@1": `syntax = "proto3"; package tree; message Node { repeated Node children = 1; int32 value = 2; }`,
	"tree/node.proto@2": `syntax = "proto3"; package tree; message Node { repeated Node children = 1; string value = 2; }`,
}

func protobufTestResolve(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
	text, ok := protobufTestDeps[fmt.Sprintf("%s@%d", ref.Name, ref.Version)]
	if !ok {
		return "", "", nil, fmt.Errorf("no %s version %d", ref.Name, ref.Version)
	}
	return text, schema.TypeProtobuf, nil, nil
}

func protobufTestParseRefs(t *testing.T, text string, refs []schema.Reference) *protobufSchema {
	t.Helper()
	s, err := protobufFormat{}.Parse(text, refs, protobufTestResolve)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, text)
	}
	return s.(*protobufSchema)
}

func protobufTestRules(inc []schema.Incompatibility) []string {
	out := make([]string, len(inc))
	for i, c := range inc {
		out[i] = c.Rule + " " + c.Path
	}
	sort.Strings(out)
	return out
}

const protobufP3 = "syntax = \"proto3\";\n"
const protobufP2 = "syntax = \"proto2\";\n"

func TestProtobufCompatibility(t *testing.T) {
	t.Parallel()
	pointRef := func(v int) []schema.Reference {
		return []schema.Reference{{Name: "geo/point.proto", Subject: "geo-point", Version: v}}
	}
	const usesPoint = protobufP3 + `import "geo/point.proto"; message Place { geo.Point at = 1; }`
	cases := []struct {
		name           string
		writer, reader string
		wRefs, rRefs   []schema.Reference
		want           []string // "RULE path", sorted
	}{
		// Additions, removals and renames that old data survives.
		{name: "field added",
			writer: protobufP3 + `message M { string a = 1; }`,
			reader: protobufP3 + `message M { string a = 1; int64 b = 2; }`},
		{name: "field removed without reserving its number",
			writer: protobufP3 + `message M { string a = 1; int64 b = 2; }`,
			reader: protobufP3 + `message M { string a = 1; }`},
		{name: "field renamed",
			writer: protobufP3 + `message M { string a = 1; }`,
			reader: protobufP3 + `message M { string alpha = 1; }`},
		{name: "enum constants added, removed, renamed; enum removed",
			writer: protobufP3 + `enum S { S0 = 0; S1 = 1; S2 = 2; } enum Gone { G0 = 0; } message M { S s = 1; }`,
			reader: protobufP3 + `enum S { S0 = 0; ONE = 1; S3 = 3; } message M { S s = 1; }`},

		// PACKAGE_CHANGED
		{name: "package kept, message added",
			writer: protobufP3 + `package shop; message A { string id = 1; }`,
			reader: protobufP3 + `package shop; message A { string id = 1; } message B { string id = 1; }`},
		{name: "package changed",
			writer: protobufP3 + `package shop; message A { string id = 1; }`,
			reader: protobufP3 + `package store; message A { string id = 1; }`,
			want:   []string{"PACKAGE_CHANGED store"}},

		// MESSAGE_REMOVED
		{name: "messages reordered",
			writer: protobufP3 + `message A { string id = 1; } message B { string id = 1; }`,
			reader: protobufP3 + `message B { string id = 1; } message A { string id = 1; }`},
		{name: "top-level message removed",
			writer: protobufP3 + `message A { string id = 1; } message B { string id = 1; }`,
			reader: protobufP3 + `message A { string id = 1; }`,
			want:   []string{"MESSAGE_REMOVED B"}},
		{name: "nested message removed",
			writer: protobufP3 + `message A { message In { int32 x = 1; } In in = 1; }`,
			reader: protobufP3 + `message A { message In2 { int32 x = 1; } In2 in = 1; }`,
			want:   []string{"FIELD_NAMED_TYPE_CHANGED A.in", "MESSAGE_REMOVED A.In"}},

		// FIELD_KIND_CHANGED
		{name: "int32 to enum",
			writer: protobufP3 + `message M { int32 s = 1; }`,
			reader: protobufP3 + `enum S { S0 = 0; } message M { S s = 1; }`},
		{name: "int32 to message",
			writer: protobufP3 + `message M { int32 s = 1; }`,
			reader: protobufP3 + `message S { int32 v = 1; } message M { S s = 1; }`,
			want:   []string{"FIELD_KIND_CHANGED M.s"}},
		{name: "map to repeated message",
			writer: protobufP3 + `message M { map<string, int32> counts = 1; }`,
			reader: protobufP3 + `message C { string k = 1; int32 v = 2; } message M { repeated C counts = 1; }`,
			want:   []string{"FIELD_KIND_CHANGED M.counts"}},

		// FIELD_SCALAR_KIND_CHANGED
		{name: "varint types interchange",
			writer: protobufP3 + `message M { int32 a = 1; uint32 b = 2; bool c = 3; int64 d = 4; }`,
			reader: protobufP3 + `message M { uint64 a = 1; int64 b = 2; int32 c = 3; bool d = 4; }`},
		{name: "zigzag, fixed and length-delimited pairs interchange",
			writer: protobufP3 + `message M { sint32 a = 1; fixed32 b = 2; fixed64 c = 3; string d = 4; }`,
			reader: protobufP3 + `message M { sint64 a = 1; sfixed32 b = 2; sfixed64 c = 3; bytes d = 4; }`},
		{name: "int32 to string",
			writer: protobufP3 + `message M { int32 a = 1; }`,
			reader: protobufP3 + `message M { string a = 1; }`,
			want:   []string{"FIELD_SCALAR_KIND_CHANGED M.a"}},
		{name: "int32 to sint32, float to double, fixed32 to fixed64",
			writer: protobufP3 + `message M { int32 a = 1; float b = 2; fixed32 c = 3; }`,
			reader: protobufP3 + `message M { sint32 a = 1; double b = 2; fixed64 c = 3; }`,
			want:   []string{"FIELD_SCALAR_KIND_CHANGED M.a", "FIELD_SCALAR_KIND_CHANGED M.b", "FIELD_SCALAR_KIND_CHANGED M.c"}},
		{name: "map key widened",
			writer: protobufP3 + `message M { map<int32, string> names = 1; }`,
			reader: protobufP3 + `message M { map<int64, bytes> names = 1; }`},
		{name: "map value changed",
			writer: protobufP3 + `message M { map<string, int32> counts = 1; }`,
			reader: protobufP3 + `message M { map<string, string> counts = 1; }`,
			want:   []string{"FIELD_SCALAR_KIND_CHANGED M.counts"}},
		{name: "type change hidden by a oneof rename",
			writer: protobufP3 + `message M { oneof old { float f = 1; int32 n = 2; } }`,
			reader: protobufP3 + `message M { oneof renamed { float f = 1; string n = 2; } }`,
			want:   []string{"FIELD_SCALAR_KIND_CHANGED M.n"}},

		// FIELD_NAMED_TYPE_CHANGED
		{name: "type name qualified differently",
			writer: protobufP3 + `package p; message M { message S { int32 v = 1; } S s = 1; map<string, S> m = 2; }`,
			reader: protobufP3 + `package p; message M { message S { int32 v = 1; } .p.M.S s = 1; map<string, M.S> m = 2; }`},
		{name: "type replaced",
			writer: protobufP3 + `message A { int32 v = 1; } message B { int32 v = 1; } message M { A x = 1; }`,
			reader: protobufP3 + `message A { int32 v = 1; } message B { int32 v = 1; } message M { B x = 1; }`,
			want:   []string{"FIELD_NAMED_TYPE_CHANGED M.x"}},
		{name: "imported type gains a field",
			writer: usesPoint, wRefs: pointRef(1),
			reader: usesPoint, rRefs: pointRef(2)},
		{name: "imported type moves to another package",
			writer: usesPoint, wRefs: pointRef(1),
			reader: protobufP3 + `import "geo/point.proto"; message Place { geo.v2.Point at = 1; }`, rRefs: pointRef(4)},
		{name: "imported type changes a field type",
			writer: usesPoint, wRefs: pointRef(1),
			reader: usesPoint, rRefs: pointRef(3),
			want: []string{"FIELD_NAMED_TYPE_CHANGED Place.at", "FIELD_SCALAR_KIND_CHANGED geo.Point.x"}},
		{name: "imported type moved into the schema",
			writer: usesPoint, wRefs: pointRef(1),
			reader: protobufP3 + `package geo; message Place { Point at = 1; } message Point { int32 x = 1; int32 y = 2; }`,
			want:   []string{"PACKAGE_CHANGED geo"}},
		{name: "recursive imported type changes",
			writer: protobufP3 + `import "tree/node.proto"; message T { tree.Node root = 1; }`,
			wRefs:  []schema.Reference{{Name: "tree/node.proto", Subject: "node", Version: 1}},
			reader: protobufP3 + `import "tree/node.proto"; message T { tree.Node root = 1; }`,
			rRefs:  []schema.Reference{{Name: "tree/node.proto", Subject: "node", Version: 2}},
			want:   []string{"FIELD_NAMED_TYPE_CHANGED T.root", "FIELD_SCALAR_KIND_CHANGED tree.Node.value"}},

		// FIELD_NUMERIC_LABEL_CHANGED (and the string/bytes label change, which is compatible)
		{name: "optional string to repeated",
			writer: protobufP2 + `message M { optional string s = 1; optional bytes b = 2; }`,
			reader: protobufP2 + `message M { repeated string s = 1; repeated bytes b = 2; }`},
		{name: "optional int32 to repeated",
			writer: protobufP2 + `message M { optional int32 n = 1; }`,
			reader: protobufP2 + `message M { repeated int32 n = 1; }`,
			want:   []string{"FIELD_NUMERIC_LABEL_CHANGED M.n"}},
		{name: "proto3 explicit optional enum to repeated",
			writer: protobufP3 + `enum E { E0 = 0; } message M { optional E e = 1; }`,
			reader: protobufP3 + `enum E { E0 = 0; } message M { repeated E e = 1; }`,
			want:   []string{"FIELD_NUMERIC_LABEL_CHANGED M.e"}},
		// Like Confluent, a label only counts when the text writes one.
		{name: "proto3 implicit int32 to repeated",
			writer: protobufP3 + `message M { int32 n = 1; }`,
			reader: protobufP3 + `message M { repeated int32 n = 1; }`},

		// REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED
		{name: "optional field added (proto2)",
			writer: protobufP2 + `message M { optional string a = 1; }`,
			reader: protobufP2 + `message M { optional string a = 1; optional string b = 2; }`},
		{name: "required field added",
			writer: protobufP2 + `message M { optional string a = 1; }`,
			reader: protobufP2 + `message M { optional string a = 1; required string b = 2; }`,
			want:   []string{"REQUIRED_FIELD_ADDED M.b"}},
		{name: "optional field removed (proto2)",
			writer: protobufP2 + `message M { optional string a = 1; optional string b = 2; }`,
			reader: protobufP2 + `message M { optional string a = 1; }`},
		{name: "required field removed",
			writer: protobufP2 + `message M { optional string a = 1; required string b = 2; }`,
			reader: protobufP2 + `message M { optional string a = 1; }`,
			want:   []string{"REQUIRED_FIELD_REMOVED M.b"}},

		// ONEOF_FIELD_REMOVED
		{name: "whole oneof deleted",
			writer: protobufP3 + `message M { string id = 1; oneof pay { string card = 2; string iban = 3; } }`,
			reader: protobufP3 + `message M { string id = 1; }`},
		{name: "oneof member removed",
			writer: protobufP3 + `message M { oneof pay { string card = 2; string iban = 3; } }`,
			reader: protobufP3 + `message M { oneof pay { string card = 2; } }`,
			want:   []string{"ONEOF_FIELD_REMOVED M.iban"}},
		{name: "oneof member dropped while the oneof is renamed",
			writer: protobufP3 + `message M { oneof pay { string card = 2; string iban = 3; } }`,
			reader: protobufP3 + `message M { oneof payment { string card = 2; } }`,
			want:   []string{"ONEOF_FIELD_REMOVED M.iban"}},

		// MULTIPLE_FIELDS_MOVED_TO_ONEOF
		{name: "one field moved into a new oneof",
			writer: protobufP3 + `message M { string a = 1; string b = 2; }`,
			reader: protobufP3 + `message M { string a = 1; oneof o { string b = 2; int32 c = 3; } }`},
		{name: "two fields moved into a new oneof",
			writer: protobufP3 + `message M { string a = 1; string b = 2; }`,
			reader: protobufP3 + `message M { oneof o { string a = 1; string b = 2; } }`,
			want:   []string{"MULTIPLE_FIELDS_MOVED_TO_ONEOF M.o"}},

		// FIELD_MOVED_TO_EXISTING_ONEOF
		{name: "new field added to an existing oneof, member moved to top level",
			writer: protobufP3 + `message M { oneof o { string a = 1; string b = 2; } }`,
			reader: protobufP3 + `message M { oneof o { string a = 1; string c = 3; } string b = 2; }`},
		{name: "field moved into an existing oneof",
			writer: protobufP3 + `message M { string a = 1; oneof o { string b = 2; } }`,
			reader: protobufP3 + `message M { oneof o { string a = 1; string b = 2; } }`,
			want:   []string{"FIELD_MOVED_TO_EXISTING_ONEOF M.o"}},
		{name: "two oneofs merged",
			writer: protobufP3 + `message M { oneof x { int32 a = 1; } oneof y { int32 b = 2; } }`,
			reader: protobufP3 + `message M { oneof z { int32 a = 1; int32 b = 2; } }`,
			want:   []string{"FIELD_MOVED_TO_EXISTING_ONEOF M.z"}},
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := protobufTestParseRefs(t, tc.writer, tc.wRefs)
			r := protobufTestParseRefs(t, tc.reader, tc.rRefs)
			inc := protobufFormat{}.Compatibility(r, w)
			got := protobufTestRules(inc)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got %q\nwant %q\n%v", got, tc.want, inc)
			}
			for _, c := range inc {
				if c.Message == "" {
					t.Errorf("%s has no message", c.Rule)
				}
			}
			if self := (protobufFormat{}).Compatibility(r, r); len(self) != 0 {
				t.Errorf("a schema is incompatible with itself: %v", self)
			}
		})
	}
}

func TestProtobufCompatibilityOtherFormat(t *testing.T) {
	t.Parallel()
	s := protobufTestParse(t, protobufP3+`message M {}`)
	for _, inc := range [][]schema.Incompatibility{
		protobufFormat{}.Compatibility(s, protobufOtherSchema{}),
		protobufFormat{}.Compatibility(protobufOtherSchema{}, s),
	} {
		if len(inc) != 1 || inc[0].Rule != "TYPE_MISMATCH" {
			t.Errorf("got %v, want one TYPE_MISMATCH", inc)
		}
	}
}

// TestProtobufCheckModes runs schema.Check in every mode on a history where
// the candidate is compatible with the latest version but not the first
// (transitive modes differ), and on one where only the backward direction
// holds (forward modes differ).
func TestProtobufCheckModes(t *testing.T) {
	t.Parallel()
	parse := func(text string) schema.Schema { return protobufTestParse(t, protobufP3+text) }
	// v1 has a as int32, v2 drops it, the candidate brings it back as a
	// string: fine next to v2, a scalar kind change next to v1.
	history := []schema.Schema{
		parse(`message M { int32 a = 1; string b = 2; }`),
		parse(`message M { string b = 2; }`),
	}
	revived := parse(`message M { string a = 1; string b = 2; }`)
	// Adding a oneof member: new readers read old data; old readers
	// facing the new member lose the oneof's value.
	oneofOld := []schema.Schema{parse(`message M { oneof o { string a = 1; } }`)}
	oneofNew := parse(`message M { oneof o { string a = 1; int32 b = 2; } }`)

	cases := []struct {
		mode              schema.Mode
		revived, oneofNew []string
	}{
		{schema.Backward, nil, nil},
		{schema.BackwardTransitive, []string{"FIELD_SCALAR_KIND_CHANGED M.a"}, nil},
		{schema.Forward, nil, []string{"ONEOF_FIELD_REMOVED M.b"}},
		{schema.ForwardTransitive, []string{"FIELD_SCALAR_KIND_CHANGED M.a"}, []string{"ONEOF_FIELD_REMOVED M.b"}},
		{schema.Full, nil, []string{"ONEOF_FIELD_REMOVED M.b"}},
		{schema.FullTransitive, []string{"FIELD_SCALAR_KIND_CHANGED M.a", "FIELD_SCALAR_KIND_CHANGED M.a"}, []string{"ONEOF_FIELD_REMOVED M.b"}},
		{schema.None, nil, nil},
	}
	if len(cases) != len(schema.Modes) {
		t.Fatalf("%d cases for %d modes", len(cases), len(schema.Modes))
	}
	f := protobufFormat{}
	for _, tc := range cases {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			got := schema.Check(f, tc.mode, revived, history)
			if rules := protobufTestRules(got); strings.Join(rules, ",") != strings.Join(tc.revived, ",") {
				t.Errorf("revived field: got %v, want %v", got, tc.revived)
			}
			for _, inc := range got {
				if !strings.Contains(inc.Message, "version 1") {
					t.Errorf("reason does not name version 1: %s", inc.Message)
				}
			}
			got = schema.Check(f, tc.mode, oneofNew, oneofOld)
			if rules := protobufTestRules(got); strings.Join(rules, ",") != strings.Join(tc.oneofNew, ",") {
				t.Errorf("oneof member added: got %v, want %v", got, tc.oneofNew)
			}
		})
	}
}
