package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/semaq"
)

// The ready-made schemas of bench/schemas, one per format, all with the
// same sample payload.
var shippedSchemas = map[schema.Type]string{
	schema.TypeJSON:     "inference-request.json",
	schema.TypeAvro:     "inference-request.avsc",
	schema.TypeProtobuf: "inference-request.proto",
}

const shippedSample = "inference-request.sample.json"

func shippedFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "bench", "schemas", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// schemaConfig is tinyConfig enforcing the shipped schema of type typ,
// sending the shipped sample.
func schemaConfig(t testing.TB, typ schema.Type) IngestConfig {
	cfg := tinyConfig(t)
	cfg.Size = 0
	cfg.Schema = &SchemaConfig{Type: typ, Text: string(shippedFile(t, shippedSchemas[typ])), File: shippedSchemas[typ]}
	cfg.Payload, cfg.PayloadFile = shippedFile(t, shippedSample), shippedSample
	return cfg
}

// The shipped sample fits every shipped schema, as is and padded, and
// comes out in the wire format of its type.
func TestPreparePayloadShipped(t *testing.T) {
	t.Parallel()
	sample := bytes.TrimSpace(shippedFile(t, shippedSample))
	for typ := range shippedSchemas {
		t.Run(string(typ), func(t *testing.T) {
			t.Parallel()
			cfg := schemaConfig(t, typ)
			pl, err := preparePayload(&cfg)
			if err != nil {
				t.Fatal(err)
			}
			if pl.framed != (typ != schema.TypeJSON) || pl.padded {
				t.Errorf("framed %v, padded %v", pl.framed, pl.padded)
			}
			if typ == schema.TypeJSON && !bytes.Equal(pl.body, sample) {
				t.Errorf("JSON payload not sent as is:\n%s", pl.body)
			}
			if typ == schema.TypeProtobuf && pl.body[0] != 0 {
				t.Errorf("Protobuf payload starts with %#x, want message index list [0] as one zero byte", pl.body[0])
			}
			data := pl.data(7)
			if len(data) != pl.size() {
				t.Errorf("data is %d bytes, size says %d", len(data), pl.size())
			}
			if pl.framed && (data[0] != 0 || binary.BigEndian.Uint32(data[1:5]) != 7 || !bytes.Equal(data[5:], pl.body)) {
				t.Errorf("not in Confluent's wire format with id 7: % x", data[:5])
			}

			for _, size := range []int{pl.size() + 1, 1024, 64 << 10} {
				cfg.Size = size
				pl, err := preparePayload(&cfg)
				if err != nil {
					t.Fatalf("size %d: %v", size, err)
				}
				if !pl.padded || pl.size() > size || pl.size() < size-1 {
					t.Errorf("size %d: got %d bytes, padded %v", size, pl.size(), pl.padded)
				}
				if err := pl.compiled.Validate(pl.body); err != nil {
					t.Errorf("size %d: padded payload invalid: %v", size, err)
				}
				if typ == schema.TypeJSON && !bytes.Contains(pl.body, []byte(`five bullet points.`+filler[:min(len(filler), size-304)])) {
					t.Errorf("size %d: padding not at the end of the user's message:\n%.300s", size, pl.body)
				}
			}
		})
	}
}

// A payload the schema refuses is refused before anything starts, saying
// what and where.
func TestPreparePayloadMismatch(t *testing.T) {
	t.Parallel()
	sample := string(shippedFile(t, shippedSample))
	badRole := strings.Replace(sample, `"role":"user"`, `"role":"admin"`, 1)
	extra := strings.Replace(sample, `"stream":false`, `"stream":false,"seed":7`, 1)
	tests := []struct {
		name    string
		typ     schema.Type
		schema  string // "" for the shipped one
		payload string
		size    int
		want    []string
	}{
		{"json role", schema.TypeJSON, "", badRole, 0, []string{"payload: bad.json does not match inference-request.json", "/messages/1/role", "enum"}},
		{"json field", schema.TypeJSON, "", extra, 0, []string{"does not match", "seed"}},
		{"avro enum", schema.TypeAvro, "", badRole, 0, []string{"does not match inference-request.avsc", `at /messages/1/role: "admin" is not a symbol of enum dev.semaq.bench.Role`}},
		{"avro field", schema.TypeAvro, "", extra, 0, []string{`has no field "seed"`}},
		{"protobuf field", schema.TypeProtobuf, "", extra, 0, []string{"does not match inference-request.proto", "semaq.bench.v1.InferenceRequest", "seed"}},
		{"not json", schema.TypeJSON, "", "model: llama", 0, []string{"payload: bad.json is not a JSON document"}},
		{"too small", schema.TypeJSON, "", sample, 100, []string{"size: 100 bytes is less than bad.json takes as sent (304 bytes)"}},
		{"padding breaks it", schema.TypeJSON,
			`{"type":"object","properties":{"messages":{"type":"array","items":{"properties":{"content":{"maxLength":200}}}}}}`,
			sample, 1024, []string{"bad.json padded to 1024 bytes (at /messages/1/content) does not match", "maxLength"}},
		{"no string", schema.TypeJSON, `{"type":"array"}`, "[1,2,3]", 64, []string{"cannot pad bad.json to 64 bytes: the payload has no string value"}},
		{"bad schema", schema.TypeAvro, `{"type":"record"}`, sample, 0, []string{"schema: inference-request.avsc does not parse as AVRO"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := schemaConfig(t, tt.typ)
			if tt.schema != "" {
				cfg.Schema.Text = tt.schema
			}
			cfg.Payload, cfg.PayloadFile, cfg.Size = []byte(tt.payload), "bad.json", tt.size
			_, err := preparePayload(&cfg)
			if !errors.Is(err, ErrBadConfig) {
				t.Fatalf("err = %v, want ErrBadConfig", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestPadJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc, want, at string
	}{
		{`{"a_very_long_key_indeed":"xy","b":["abc",{"c/~":"abcd"}]}`, `{"a_very_long_key_indeed":"xy","b":["abc",{"c/~":"abcd++"}]}`, "/b/1/c~1~0"},
		{`["ab","cd"]`, `["ab++","cd"]`, "/0"},
		{`"s"`, `"s++"`, ""},
		{`{"n":1,"o":{},"a":[],"s":"x","t":true}`, `{"n":1,"o":{},"a":[],"s":"x++","t":true}`, "/s"},
	}
	for _, tt := range tests {
		got, at, err := padJSON([]byte(tt.doc), 2)
		got = bytes.ReplaceAll(got, []byte(filler[:2]), []byte("++"))
		if err != nil || string(got) != tt.want || at != tt.at {
			t.Errorf("padJSON(%s) = %s at %q, %v; want %s at %q", tt.doc, got, at, err, tt.want, tt.at)
		}
	}
}

// With a schema, the SemaQ stream is bound: the ingress stores each message
// with the schema's id in AI-Schema-Id and refuses one the schema does not
// accept. The semaq-noschema and raw streams store the same bytes
// unchecked.
func TestTargetsStoreSchema(t *testing.T) {
	for typ := range shippedSchemas {
		t.Run(string(typ), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg := schemaConfig(t, typ)
			pl, err := preparePayload(&cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := StartRig(ctx, t.TempDir(), cfg.Sync, cfg.Schema)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			if r.schemaID < 1 {
				t.Fatalf("schema id %d", r.schemaID)
			}
			setup, err := r.Setup(ctx, SchemaTargets)
			if err != nil {
				t.Fatal(err)
			}
			if setup[0].Schema != SchemaSubject || setup[1].Schema != "" || setup[2].Schema != "" {
				t.Errorf("setup %+v: want only semaq bound to %s", setup, SchemaSubject)
			}
			data := pl.data(r.schemaID)
			for _, name := range SchemaTargets {
				p, err := r.publisher(Targets[name], data, true, 8)
				if err != nil {
					t.Fatal(err)
				}
				defer p.close()
				if err := p.publishSync(ctx); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			bad, err := r.publisher(Targets[TargetSemaq], []byte(`{"model":""}`), false, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer bad.close()
			if err := bad.publishSync(ctx); err == nil || !strings.Contains(err.Error(), "schema") {
				t.Errorf("a payload the schema refuses was published: err = %v", err)
			}
			unbound, err := r.publisher(Targets[TargetSemaqNoSchema], []byte(`{"model":""}`), false, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer unbound.close()
			if err := unbound.publishSync(ctx); err != nil {
				t.Errorf("%s validated: %v", TargetSemaqNoSchema, err)
			}

			js := operatorJS(t, r)
			for _, tc := range []struct {
				stream string
				id     string
				msgs   uint64
			}{{semaqStream, strconv.Itoa(r.schemaID), 1}, {noSchemaStream, "", 2}, {JetStreamStream, "", 1}} {
				st, err := js.Stream(ctx, tc.stream)
				if err != nil {
					t.Fatal(err)
				}
				if n := st.CachedInfo().State.Msgs; n != tc.msgs {
					t.Errorf("%s holds %d messages, want %d", tc.stream, n, tc.msgs)
				}
				m, err := st.GetMsg(ctx, 1)
				if err != nil {
					t.Fatalf("%s: %v", tc.stream, err)
				}
				if !bytes.Equal(m.Data, data) {
					t.Errorf("%s stored other bytes than were sent", tc.stream)
				}
				if got := m.Header.Get(semaq.HdrSchemaID); got != tc.id {
					t.Errorf("%s: AI-Schema-Id %q, want %q", tc.stream, got, tc.id)
				}
			}
		})
	}
}

// A short run with the shipped JSON pair: every target measured, the SemaQ
// stream bound, the validation timed, the 0.7× goal applied, the cost of
// enforcement stated.
func TestRunIngestSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := schemaConfig(t, schema.TypeJSON)
	cfg.Targets = SchemaTargets
	cfg.Rounds = 2
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range SchemaTargets {
		res := rep.Result(name)
		if res == nil || res.Msgs <= 0 || res.LatencySamples <= 0 || res.Errors != 0 {
			t.Fatalf("%s: %+v", name, res)
		}
	}
	c := rep.Config
	if c.Size != 304 || c.Payload != shippedSample || c.PayloadPadded {
		t.Errorf("config size %d, payload %q, padded %v; want the sample's 304 bytes as is", c.Size, c.Payload, c.PayloadPadded)
	}
	if s := c.Schema; s == nil || s.Type != "JSON" || s.Subject != SchemaSubject || s.ID < 1 || s.ConfluentFramed {
		t.Errorf("config schema %+v", s)
	}
	checkSetup(t, rep, map[string]TargetSetup{
		TargetSemaq:         {Target: TargetSemaq, Server: ServerBroker, Stream: semaqStream, Durability: DurabilityInterval, Schema: SchemaSubject, IngressTransport: broker.IngressPipe},
		TargetSemaqNoSchema: {Target: TargetSemaqNoSchema, Server: ServerBroker, Stream: noSchemaStream, Durability: DurabilityInterval, IngressTransport: broker.IngressPipe},
		TargetJetStream:     {Target: TargetJetStream, Server: ServerBroker, Stream: JetStreamStream, Durability: DurabilityInterval},
	})
	if sc := rep.SchemaCost; sc == nil || sc.ThroughputRatio <= 0 {
		t.Errorf("schema cost %+v", sc)
	}
	if r := rep.Result(TargetSemaqNoSchema).RatioVsJetStream; r == nil || *r <= 0 {
		t.Errorf("%s has no ratio to jetstream", TargetSemaqNoSchema)
	}
	if g := rep.Goals; g == nil || g.ThroughputRatioMin != GoalSchemaThroughputRatio {
		t.Errorf("goals %+v: want the schema goal, throughput ≥ %.2f×", g, GoalSchemaThroughputRatio)
	}
	v := rep.Validation
	if v == nil || v.SchemaType != "JSON" || v.PayloadBytes != 304 || v.Ops <= 0 || v.NSPerOp <= 0 || v.NSPerOpMax != GoalValidationNS {
		t.Errorf("validation %+v", v)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ingest: 304-byte messages",
		"every message validated against registry subject " + SchemaSubject,
		"payload: " + shippedSample + ", 304 bytes, sent as is",
		"schema: JSON inference-request.json, registry subject " + SchemaSubject,
		"validation in process",
		"goals: throughput with JSON schema enforcement ≥ 0.70× jetstream",
		"goals: JSON validation ≤ 10 µs",
		"schema enforcement: semaq at",
		"semaq-noschema vs jetstream",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}
