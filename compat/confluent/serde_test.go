//go:build cgo

// Confluent's serde packages import confluent-kafka-go/v2/kafka (for
// kafka.Header), a cgo binding of librdkafka, so these tests need cgo and a
// C compiler; serde_nocgo_test.go says so when cgo is off.

package confluent_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/avrov2"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/jsonschema"
	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry/serde/protobuf"
	"github.com/jhump/protoreflect/desc/protoparse"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// Order is serialized with the Avro serializer, which derives its schema
// from the struct.
type Order struct {
	ID     string   `avro:"id"`
	Amount float64  `avro:"amount"`
	Items  []string `avro:"items"`
}

// Event is serialized with the JSON Schema serializer, which derives its
// schema from the struct (every field required, no others allowed).
type Event struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

// shapesProto is the Protobuf schema; Shape is its second message, so its
// payloads carry the message-index list [1].
const shapesProto = `syntax = "proto3";
package shapes;

message Point {
  int32 x = 1;
  int32 y = 2;
}

message Shape {
  string name = 1;
  Point center = 2;
  repeated string tags = 3;
  double radius = 4;
}
`

// TestSerializers runs each Confluent serializer's output through SemaQ's
// schema-on-write ingress with a stock JetStream publish, and each
// deserializer over what was stored.
func TestSerializers(t *testing.T) {
	s := startSemaq(t)
	nc, err := nats.Connect(s.nats)
	if err != nil {
		t.Fatalf("nats.Connect(%s): %v", s.nats, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("avro", func(t *testing.T) { testAvro(t, s, js) })
	t.Run("avro with references", func(t *testing.T) { testAvroReferences(t, s, js) })
	t.Run("jsonschema", func(t *testing.T) { testJSONSchema(t, s, js) })
	t.Run("protobuf", func(t *testing.T) { testProtobuf(t, s, js) })
}

func testAvro(t *testing.T, s *server, js jetstream.JetStream) {
	producer, prec := s.registryClient(t)
	ser, err := avrov2.NewSerializer(producer, serde.ValueSerde, avrov2.NewSerializerConfig())
	if err != nil {
		t.Fatalf("avrov2.NewSerializer: %v", err)
	}
	in := &Order{ID: "o-1", Amount: 12.5, Items: []string{"apple", "pear"}}
	payload, err := ser.Serialize("orders", in)
	if err != nil {
		t.Fatalf("avrov2 Serializer.Serialize(orders, %+v) with auto-register: %v\n  last exchange: %s", in, err, prec.Last())
	}
	id := frameID(t, "avrov2 Serializer.Serialize", payload, producer, "orders-value")

	p := pipeline{s: s, js: js, stream: "ORDERS", topic: "orders", subject: "orders.created"}
	p.bind(t)
	decoy := registerSchema(t, producer, prec, "orders-decoy", schemaregistry.SchemaInfo{Schema: paymentV1})
	stored := p.publish(t, "avrov2", payload, id, []refusal{
		{"truncated", payload[:len(payload)-2], []string{fmt.Sprintf("does not match schema id %d (registry subject orders-value)", id)}},
		{"framed with another subject's schema id", reframe(payload, decoy), []string{fmt.Sprintf("schema id %d is not a version of registry subject orders-value", decoy)}},
		{"framed with an unknown schema id", reframe(payload, 9999), []string{"schema id 9999 is not a version of registry subject orders-value"}},
		{"without the Confluent frame", payload[5:], []string{"AVRO payloads on orders.created need a schema id"}},
	})

	consumer, crec := s.registryClient(t)
	deser, err := avrov2.NewDeserializer(consumer, serde.ValueSerde, avrov2.NewDeserializerConfig())
	if err != nil {
		t.Fatalf("avrov2.NewDeserializer: %v", err)
	}
	var out Order
	if err := deser.DeserializeInto("orders", stored, &out); err != nil {
		t.Fatalf("avrov2 Deserializer.DeserializeInto(orders, stored message) = %v\n  last exchange: %s", err, crec.Last())
	}
	if !reflect.DeepEqual(&out, in) {
		t.Errorf("avrov2 Deserializer.DeserializeInto(orders, stored message) = %+v, want %+v", out, *in)
	}
	// Generic decoding, as a consumer without the Go type does it. (Plain
	// Deserialize needs a MessageFactory, nil by default: it panics.)
	var generic map[string]any
	err = deser.DeserializeInto("orders", stored, &generic)
	want := map[string]any{"id": "o-1", "amount": 12.5, "items": []any{"apple", "pear"}}
	if err != nil || !reflect.DeepEqual(generic, want) {
		t.Errorf("avrov2 Deserializer.DeserializeInto(orders, stored message, map) = %#v, %v; want %#v\n  last exchange: %s", generic, err, want, crec.Last())
	}
}

// Invoice's schema refers to Money's, registered under a subject of its own.
type Invoice struct {
	Number string `avro:"number"`
	Total  Money  `avro:"total"`
}

type Money struct {
	Units    int64  `avro:"units"`
	Currency string `avro:"currency"`
}

const (
	moneySchema   = `{"type":"record","name":"Money","namespace":"com.example","fields":[{"name":"units","type":"long"},{"name":"currency","type":"string"}]}`
	invoiceSchema = `{"type":"record","name":"Invoice","namespace":"com.example","fields":[{"name":"number","type":"string"},{"name":"total","type":"com.example.Money"}]}`
)

// testAvroReferences registers a schema with a reference by hand, as
// schema-first teams do, and has the serializer use the subject's latest
// version instead of registering: the serializer, the ingress and the
// deserializer all have to resolve the reference.
func testAvroReferences(t *testing.T, s *server, js jetstream.JetStream) {
	producer, prec := s.registryClient(t)
	moneyID := registerSchema(t, producer, prec, "money", schemaregistry.SchemaInfo{Schema: moneySchema})
	refs := []schemaregistry.Reference{{Name: "com.example.Money", Subject: "money", Version: 1}}
	if _, err := producer.Register("invoices-value", schemaregistry.SchemaInfo{Schema: invoiceSchema, References: refs}, false); err != nil {
		t.Fatalf("Register(invoices-value, Avro schema referencing money version 1): %v\n  last exchange: %s", err, prec.Last())
	}
	if meta, err := producer.GetLatestSchemaMetadata("invoices-value"); err != nil || !slices.Equal(meta.References, refs) {
		t.Fatalf("GetLatestSchemaMetadata(invoices-value) = references %v, %v; want %v\n  last exchange: %s", meta.References, err, refs, prec.Last())
	}

	conf := avrov2.NewSerializerConfig()
	conf.AutoRegisterSchemas = false
	conf.UseLatestVersion = true
	ser, err := avrov2.NewSerializer(producer, serde.ValueSerde, conf)
	if err != nil {
		t.Fatalf("avrov2.NewSerializer: %v", err)
	}
	in := &Invoice{Number: "INV-7", Total: Money{Units: 1999, Currency: "EUR"}}
	payload, err := ser.Serialize("invoices", in)
	if err != nil {
		t.Fatalf("avrov2 Serializer.Serialize(invoices, %+v) with UseLatestVersion: %v\n  last exchange: %s", in, err, prec.Last())
	}
	id := frameID(t, "avrov2 Serializer.Serialize", payload, producer, "invoices-value")

	p := pipeline{s: s, js: js, stream: "INVOICES", topic: "invoices", subject: "invoices.issued"}
	p.bind(t)
	stored := p.publish(t, "avrov2", payload, id, []refusal{
		{"truncated", payload[:len(payload)-2], []string{fmt.Sprintf("does not match schema id %d (registry subject invoices-value)", id)}},
		{"framed with the referenced schema's id", reframe(payload, moneyID), []string{fmt.Sprintf("schema id %d is not a version of registry subject invoices-value", moneyID)}},
	})

	consumer, crec := s.registryClient(t)
	deser, err := avrov2.NewDeserializer(consumer, serde.ValueSerde, avrov2.NewDeserializerConfig())
	if err != nil {
		t.Fatalf("avrov2.NewDeserializer: %v", err)
	}
	var out Invoice
	if err := deser.DeserializeInto("invoices", stored, &out); err != nil {
		t.Fatalf("avrov2 Deserializer.DeserializeInto(invoices, stored message) = %v\n  last exchange: %s", err, crec.Last())
	}
	if out != *in {
		t.Errorf("avrov2 Deserializer.DeserializeInto(invoices, stored message) = %+v, want %+v", out, *in)
	}
}

func testJSONSchema(t *testing.T, s *server, js jetstream.JetStream) {
	producer, prec := s.registryClient(t)
	conf := jsonschema.NewSerializerConfig()
	conf.EnableValidation = true
	ser, err := jsonschema.NewSerializer(producer, serde.ValueSerde, conf)
	if err != nil {
		t.Fatalf("jsonschema.NewSerializer: %v", err)
	}
	in := &Event{Name: "signup", Count: 3}
	payload, err := ser.Serialize("events", in)
	if err != nil {
		t.Fatalf("jsonschema Serializer.Serialize(events, %+v) with auto-register: %v\n  last exchange: %s", in, err, prec.Last())
	}
	id := frameID(t, "jsonschema Serializer.Serialize", payload, producer, "events-value")

	p := pipeline{s: s, js: js, stream: "EVENTS", topic: "events", subject: "events.signup"}
	p.bind(t)
	decoy := registerSchema(t, producer, prec, "events-decoy", schemaregistry.SchemaInfo{Schema: eventSchema, SchemaType: "JSON"})
	mismatch := fmt.Sprintf("does not match schema id %d (registry subject events-value)", id)
	stored := p.publish(t, "jsonschema", payload, id, []refusal{
		{"truncated", payload[:len(payload)-2], []string{mismatch}},
		{"framed with another subject's schema id", reframe(payload, decoy), []string{fmt.Sprintf("schema id %d is not a version of registry subject events-value", decoy)}},
		{"count of the wrong type", reframe([]byte(`.....{"name":"signup","count":"three"}`), id), []string{mismatch, "/count"}},
		{"missing a required field", reframe([]byte(`.....{"name":"signup"}`), id), []string{mismatch, "count"}},
		{"with a field the schema forbids", reframe([]byte(`.....{"name":"signup","count":3,"extra":true}`), id), []string{mismatch, "extra"}},
	})

	consumer, crec := s.registryClient(t)
	// The default configuration: with EnableValidation, confluent-kafka-go
	// v2.11.1's DeserializeInto validates the Go struct it filled, which
	// its JSON Schema library refuses ("invalid jsonType"), whatever the
	// registry.
	deser, err := jsonschema.NewDeserializer(consumer, serde.ValueSerde, jsonschema.NewDeserializerConfig())
	if err != nil {
		t.Fatalf("jsonschema.NewDeserializer: %v", err)
	}
	var out Event
	if err := deser.DeserializeInto("events", stored, &out); err != nil {
		t.Fatalf("jsonschema Deserializer.DeserializeInto(events, stored message) = %v\n  last exchange: %s", err, crec.Last())
	}
	if out != *in {
		t.Errorf("jsonschema Deserializer.DeserializeInto(events, stored message) = %+v, want %+v", out, *in)
	}
}

// testProtobuf uses dynamic messages built from shapesProto instead of
// generated Go types: the serializer derives the schema from the message's
// descriptor either way.
func testProtobuf(t *testing.T, s *server, js jetstream.JetStream) {
	files, err := (&protoparse.Parser{Accessor: protoparse.FileContentsFromMap(map[string]string{"shapes.proto": shapesProto})}).ParseFiles("shapes.proto")
	if err != nil {
		t.Fatalf("parsing shapes.proto: %v", err)
	}
	shapeDesc := files[0].FindMessage("shapes.Shape").UnwrapMessage()
	in := dynamicpb.NewMessage(shapeDesc)
	fields := shapeDesc.Fields()
	in.Set(fields.ByName("name"), protoreflect.ValueOfString("unit circle"))
	center := in.Mutable(fields.ByName("center")).Message()
	center.Set(center.Descriptor().Fields().ByName("x"), protoreflect.ValueOfInt32(3))
	center.Set(center.Descriptor().Fields().ByName("y"), protoreflect.ValueOfInt32(-4))
	tags := in.Mutable(fields.ByName("tags")).List()
	tags.Append(protoreflect.ValueOfString("round"))
	in.Set(fields.ByName("radius"), protoreflect.ValueOfFloat64(1.5))

	producer, prec := s.registryClient(t)
	ser, err := protobuf.NewSerializer(producer, serde.ValueSerde, protobuf.NewSerializerConfig())
	if err != nil {
		t.Fatalf("protobuf.NewSerializer: %v", err)
	}
	payload, err := ser.Serialize("shapes", in)
	if err != nil {
		t.Fatalf("protobuf Serializer.Serialize(shapes, Shape) with auto-register: %v\n  last exchange: %s", err, prec.Last())
	}
	id := frameID(t, "protobuf Serializer.Serialize", payload, producer, "shapes-value")
	// Shape is message 1 of the file: the index list is [1], a count and
	// an index as zigzag varints.
	if !slices.Equal(payload[5:7], []byte{2, 2}) {
		t.Fatalf("protobuf Serializer.Serialize(shapes, Shape) message indexes = % x, want 02 02 (the list [1])", payload[5:7])
	}
	if meta, err := producer.GetLatestSchemaMetadata("shapes-value"); err != nil || meta.SchemaType != "PROTOBUF" {
		t.Fatalf("GetLatestSchemaMetadata(shapes-value) after Serialize = schemaType %q, %v; want PROTOBUF\n  last exchange: %s", meta.SchemaType, err, prec.Last())
	}

	p := pipeline{s: s, js: js, stream: "SHAPES", topic: "shapes", subject: "shapes.drawn"}
	p.bind(t)
	decoy := registerSchema(t, producer, prec, "shapes-decoy", schemaregistry.SchemaInfo{Schema: circleProto, SchemaType: "PROTOBUF"})
	mismatch := fmt.Sprintf("does not match schema id %d (registry subject shapes-value)", id)
	stored := p.publish(t, "protobuf", payload, id, []refusal{
		// radius, a fixed64, is the last field: cutting it breaks the wire data.
		{"truncated", payload[:len(payload)-2], []string{mismatch}},
		{"framed with another subject's schema id", reframe(payload, decoy), []string{fmt.Sprintf("schema id %d is not a version of registry subject shapes-value", decoy)}},
		{"with a message index the file lacks", append(append(reframe(nil, id), 2, 14), payload[7:]...), []string{mismatch}},
	})

	consumer, crec := s.registryClient(t)
	deser, err := protobuf.NewDeserializer(consumer, serde.ValueSerde, protobuf.NewDeserializerConfig())
	if err != nil {
		t.Fatalf("protobuf.NewDeserializer: %v", err)
	}
	// What registering generated types would do: tell the deserializer
	// which Go type decodes shapes.Shape.
	if err := deser.ProtoRegistry.RegisterMessage(dynamicpb.NewMessageType(shapeDesc)); err != nil {
		t.Fatal(err)
	}
	out, err := deser.Deserialize("shapes", stored)
	if err != nil {
		t.Fatalf("protobuf Deserializer.Deserialize(shapes, stored message) = %v\n  last exchange: %s", err, crec.Last())
	}
	if m, ok := out.(proto.Message); !ok || !proto.Equal(m, in) {
		t.Errorf("protobuf Deserializer.Deserialize(shapes, stored message) = %v, want %v", out, in)
	}
}

// pipeline is one topic's path through SemaQ: a stream capturing
// "<topic>.>" bound to the registry subject "<topic>-value", as Confluent's
// TopicNameStrategy names it.
type pipeline struct {
	s       *server
	js      jetstream.JetStream
	stream  string
	topic   string
	subject string // the NATS subject published to
}

// bind creates the stream with the semaq CLI, binding it to the subject
// the serializer registered.
func (p pipeline) bind(t *testing.T) {
	t.Helper()
	p.s.cli(t, "stream", "add", p.stream, "--subjects", p.topic+".>", "--schema", p.topic+"-value")
}

// refusal is a payload the ingress must refuse, with what its error must
// say.
type refusal struct {
	name    string
	payload []byte
	want    []string
}

// publish publishes the serializer's output with a stock JetStream client,
// checks each refusal is refused and not stored, and returns the stored
// message's data after checking it is the payload, tagged with its schema
// id.
func (p pipeline) publish(t *testing.T, ser string, payload []byte, id int, refusals []refusal) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := p.js.Publish(ctx, p.subject, payload)
	if err != nil {
		t.Fatalf("jetstream Publish(%s, %s serializer output % x) = %v; want it stored", p.subject, ser, payload, err)
	}
	if ack.Stream != p.stream || ack.Sequence != 1 {
		t.Fatalf("jetstream Publish(%s, %s serializer output) acked by stream %s seq %d, want %s seq 1", p.subject, ser, ack.Stream, ack.Sequence, p.stream)
	}
	for _, r := range refusals {
		_, err := p.js.Publish(ctx, p.subject, r.payload)
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			t.Errorf("jetstream Publish(%s, %s serializer output %s: % x) was acknowledged; want it refused", p.subject, ser, r.name, r.payload)
		case !errors.As(err, &apiErr) || apiErr.ErrorCode != 20011:
			t.Errorf("jetstream Publish(%s, %s serializer output %s) = %v (%T); want a JetStream API error with err_code 20011 (schema)", p.subject, ser, r.name, err, err)
		default:
			for _, w := range r.want {
				if !strings.Contains(apiErr.Description, w) {
					t.Errorf("jetstream Publish(%s, %s serializer output %s) refused with %q; want it to say %q", p.subject, ser, r.name, apiErr.Description, w)
				}
			}
		}
	}

	stream, err := p.js.Stream(ctx, p.stream)
	if err != nil {
		t.Fatalf("jetstream Stream(%s): %v", p.stream, err)
	}
	if n := stream.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("stream %s holds %d messages after one accepted and %d refused publishes, want 1", p.stream, n, len(refusals))
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{p.topic + ".>"}})
	if err != nil {
		t.Fatalf("jetstream OrderedConsumer(%s, %s.>): %v", p.stream, p.topic, err)
	}
	msg, err := cons.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("jetstream consumer Next on %s: %v", p.stream, err)
	}
	if msg.Subject() != p.subject || !slices.Equal(msg.Data(), payload) {
		t.Fatalf("stored message = %s % x, want %s % x (the %s serializer output, byte for byte)", msg.Subject(), msg.Data(), p.subject, payload, ser)
	}
	if got := msg.Headers().Get("AI-Schema-Id"); got != strconv.Itoa(id) {
		t.Errorf("stored message header AI-Schema-Id = %q, want %d", got, id)
	}
	return msg.Data()
}

// frameID checks payload carries Confluent's wire format and returns its
// schema id, which must be the latest version of subject (auto-registered
// by the serializer).
func frameID(t *testing.T, call string, payload []byte, c schemaregistry.Client, subject string) int {
	t.Helper()
	if len(payload) < 6 || payload[0] != 0 {
		t.Fatalf("%s = % x, want Confluent's wire format (magic byte 0, 4-byte schema id, data)", call, payload)
	}
	id := int(binary.BigEndian.Uint32(payload[1:5]))
	meta, err := c.GetLatestSchemaMetadata(subject)
	if err != nil || meta.ID != id || meta.Version != 1 {
		t.Fatalf("GetLatestSchemaMetadata(%s) after %s = id %d version %d, %v; want the framed id %d, version 1", subject, call, meta.ID, meta.Version, err, id)
	}
	return id
}

// registerSchema registers info under subject and returns its id; the tests
// use it for schemas of other subjects than the bound one.
func registerSchema(t *testing.T, c schemaregistry.Client, rec *recorder, subject string, info schemaregistry.SchemaInfo) int {
	t.Helper()
	id, err := c.Register(subject, info, false)
	if err != nil {
		t.Fatalf("Register(%s, %s schema): %v\n  last exchange: %s", subject, typeName(info), err, rec.Last())
	}
	return id
}

// reframe replaces the 5-byte Confluent frame of payload with one naming
// id.
func reframe(payload []byte, id int) []byte {
	out := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(id))
	if len(payload) > 5 {
		out = append(out, payload[5:]...)
	}
	return out
}
