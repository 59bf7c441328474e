package protofmt

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/schema"
)

// FuzzProtobufSchemaParse feeds arbitrary text to Parse. It must not panic;
// what parses must print a canonical text that parses back to the same
// canonical text, be compatible with itself, and validate without panics.
func FuzzProtobufSchemaParse(f *testing.F) {
	for _, seed := range []string{
		protobufInferenceProto,
		protobufP3 + `package p; import "google/protobuf/timestamp.proto"; message M { google.protobuf.Timestamp t = 1; map<string, M> m = 2; oneof o { string a = 3; int32 b = 4; } optional bool c = 5; }`,
		protobufP2 + `message M { optional group G = 1 { required int32 x = 1; } extensions 10 to 20; } extend M { optional string e = 10 [default = "x\001"]; }`,
		protobufP3 + `enum E { option allow_alias = true; A = 0; B = 0; } service S { rpc Do(M) returns (stream M); } message M { E e = 1 [deprecated = true]; }`,
		`edition = "2023"; message M { int32 a = 1 [features.field_presence = IMPLICIT]; }`,
		`syntax = "proto3"; message`,
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 1<<14 {
			return
		}
		s, err := protobufFormat{}.Parse(text, nil, nil)
		if err != nil {
			return
		}
		c := s.Canonical()
		again, err := protobufFormat{}.Parse(c, nil, nil)
		if err != nil {
			t.Fatalf("the canonical text does not parse: %v\n%s", err, c)
		}
		if again.Canonical() != c {
			t.Fatalf("the canonical text prints differently:\n%s\nthen:\n%s", c, again.Canonical())
		}
		if inc := (protobufFormat{}).Compatibility(s, again); len(inc) != 0 {
			t.Fatalf("a schema is incompatible with its canonical form: %v", inc)
		}
		for _, payload := range [][]byte{{0}, {2, 0, 8, 1}, {4, 0, 0, 10, 1, 'x'}} {
			if err := s.Validate(payload); err != nil {
				var verr *schema.ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("Validate error is a %T: %v", err, err)
				}
			}
		}
	})
}

// FuzzProtobufValidate feeds arbitrary payloads to one schema: no panics,
// and every error is a *ValidationError.
func FuzzProtobufValidate(f *testing.F) {
	s := protobufTestParse(f, protobufInferenceProto)
	f.Add(protobufTestPayload(f, s, "inference.v1.Request",
		`model: "m" messages { role: "user" content: "hi" } max_tokens: 5 temperature: 0.5 [inference.v1.trace_id]: "t"`))
	f.Add(protobufTestPayload(f, s, "inference.v1.Request", `model: "m" named { key: "k" value { role: "r" } }`))
	f.Add(protobufTestPayload(f, s, "inference.v1.Request.Message", `role: "r"`))
	f.Add(protobufTestPayload(f, s, "inference.v1.Response.Usage", `tokens: 7`))
	f.Add([]byte{})
	f.Add([]byte{0x7f, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		err := s.Validate(payload)
		if err == nil {
			return
		}
		var verr *schema.ValidationError
		if !errors.As(err, &verr) {
			t.Fatalf("error is a %T: %v", err, err)
		}
		if verr.Rule == "" || verr.Message == "" {
			t.Fatalf("incomplete error: %+v", verr)
		}
	})
}

// FuzzProtobufLimits: the Protobuf pre-scan never panics and, with tight
// limits, Parse refuses or accepts without hanging.
func FuzzProtobufLimits(f *testing.F) {
	for _, s := range []string{protobufDeep(10), "syntax = \"proto3\"; message M { string s = 1 [(x) = {a:{b:1}}]; } /* { */ // {", `"\"{{{{`, "<<<<>"} {
		f.Add(s)
	}
	tight := protobufFormat{limits: schema.Limits{MaxDepth: 4, MaxNodes: 200}}
	f.Fuzz(func(t *testing.T, text string) {
		_, err := tight.Parse(text, nil, nil)
		var le *schema.LimitError
		if errors.As(err, &le) && le.Limit != "MaxDepth" && le.Limit != "MaxNodes" && le.Limit != "MaxSchemaBytes" {
			t.Fatalf("unexpected limit %s", le.Limit)
		}
	})
}

// protobufDeep nests n messages, as the hostile-schema tests in package
// formats do.
func protobufDeep(n int) string {
	var b strings.Builder
	b.WriteString("syntax = \"proto3\";\n")
	for i := range n {
		fmt.Fprintf(&b, "message M%d {\n", i)
	}
	b.WriteString(strings.Repeat("}\n", n))
	return b.String()
}
