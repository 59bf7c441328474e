package confluent_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/schemaregistry"
)

const (
	paymentV1 = `{"type":"record","name":"Payment","namespace":"com.example","fields":[{"name":"id","type":"string"},{"name":"amount","type":"double"}]}`
	// paymentV2 adds a field with a default: BACKWARD compatible.
	paymentV2 = `{"type":"record","name":"Payment","namespace":"com.example","fields":[{"name":"id","type":"string"},{"name":"amount","type":"double"},{"name":"currency","type":"string","default":"EUR"}]}`
	// paymentBreaking adds a field without a default: a reader of it cannot
	// read data written with v1, so BACKWARD refuses it.
	paymentBreaking = `{"type":"record","name":"Payment","namespace":"com.example","fields":[{"name":"id","type":"string"},{"name":"amount","type":"double"},{"name":"customer","type":"string"}]}`

	eventSchema = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`

	circleProto = "syntax = \"proto3\";\npackage shapes;\n\nmessage Circle {\n  double radius = 1;\n}\n"
)

// TestRegistryClient drives SemaQ's registry through Confluent's Go client
// and checks every answer is what the client expects from Confluent Schema
// Registry: ids, versions, and errors as *rest.Error with Confluent's codes.
// The steps build on each other, so they run in one test, in order.
func TestRegistryClient(t *testing.T) {
	s := startSemaq(t)
	c, rec := s.registryClient(t)

	if subjects, err := c.GetAllSubjects(); err != nil || len(subjects) != 0 {
		t.Fatalf("GetAllSubjects() on an empty registry = %q, %v; want none\n  last exchange: %s", subjects, err, rec.Last())
	}

	// Register one schema of each type; ids are global and start at 1.
	register := func(subject string, info schemaregistry.SchemaInfo, want int) {
		t.Helper()
		id, err := c.Register(subject, info, false)
		if err != nil || id != want {
			t.Fatalf("Register(%q, %s schema) = id %d, %v; want id %d\n  last exchange: %s", subject, typeName(info), id, err, want, rec.Last())
		}
	}
	avroV1 := schemaregistry.SchemaInfo{Schema: paymentV1}
	jsonInfo := schemaregistry.SchemaInfo{Schema: eventSchema, SchemaType: "JSON"}
	protoInfo := schemaregistry.SchemaInfo{Schema: circleProto, SchemaType: "PROTOBUF"}
	register("payments-value", avroV1, 1)
	register("events-value", jsonInfo, 2)
	register("shapes-value", protoInfo, 3)
	// The same schema under another subject keeps its id.
	register("payments-copy", avroV1, 1)
	// Registering a live version's schema again (past the client's cache)
	// answers its id and adds no version.
	_ = c.ClearCaches()
	register("payments-value", avroV1, 1)

	// Schemas by id: the text as registered, schemaType absent for Avro
	// (the client reads "" as AVRO), JSON and PROTOBUF spelled out.
	for _, tc := range []struct {
		subject string
		id      int
		want    schemaregistry.SchemaInfo
	}{
		{"payments-value", 1, avroV1},
		{"", 2, jsonInfo},
		{"shapes-value", 3, protoInfo},
	} {
		got, err := c.GetBySubjectAndID(tc.subject, tc.id)
		if err != nil || got.Schema != tc.want.Schema || got.SchemaType != tc.want.SchemaType || len(got.References) != 0 {
			t.Errorf("GetBySubjectAndID(%q, %d) = {schemaType %q, schema %q, references %v}, %v; want {schemaType %q, schema %q}\n  last exchange: %s",
				tc.subject, tc.id, got.SchemaType, got.Schema, got.References, err, tc.want.SchemaType, tc.want.Schema, rec.Last())
		}
	}
	_, err := c.GetBySubjectAndID("", 99)
	wantRestError(t, rec, "GetBySubjectAndID(\"\", 99)", err, 40403)

	// Lookups by schema.
	if id, err := c.GetID("payments-value", avroV1, false); err != nil || id != 1 {
		t.Errorf("GetID(payments-value, v1) = %d, %v; want 1\n  last exchange: %s", id, err, rec.Last())
	}
	if v, err := c.GetVersion("payments-value", avroV1, false); err != nil || v != 1 {
		t.Errorf("GetVersion(payments-value, v1) = %d, %v; want 1\n  last exchange: %s", v, err, rec.Last())
	}
	_, err = c.GetID("payments-value", schemaregistry.SchemaInfo{Schema: paymentV2}, false)
	wantRestError(t, rec, "GetID(payments-value, unregistered v2)", err, 40403)

	wantMeta(t, rec, "GetLatestSchemaMetadata(payments-value)", c.GetLatestSchemaMetadata, "payments-value", 1, 1, paymentV1)

	// Compatibility checks under the default level, BACKWARD.
	avroV2 := schemaregistry.SchemaInfo{Schema: paymentV2}
	breaking := schemaregistry.SchemaInfo{Schema: paymentBreaking}
	for _, tc := range []struct {
		call string
		test func() (bool, error)
		want bool
	}{
		{"TestCompatibility(payments-value, 1, v2 adding a defaulted field)", func() (bool, error) { return c.TestCompatibility("payments-value", 1, avroV2) }, true},
		{"TestCompatibility(payments-value, -1, adding a field without default)", func() (bool, error) { return c.TestCompatibility("payments-value", -1, breaking) }, false},
		{"TestSubjectCompatibility(payments-value, v2)", func() (bool, error) { return c.TestSubjectCompatibility("payments-value", avroV2) }, true},
		{"TestSubjectCompatibility(payments-value, adding a field without default)", func() (bool, error) { return c.TestSubjectCompatibility("payments-value", breaking) }, false},
	} {
		if ok, err := tc.test(); err != nil || ok != tc.want {
			t.Errorf("%s = %v, %v; want %v\n  last exchange: %s", tc.call, ok, err, tc.want, rec.Last())
		}
	}
	_, err = c.TestCompatibility("nope", 1, avroV2)
	wantRestError(t, rec, "TestCompatibility(nope, 1, v2)", err, 40401)
	_, err = c.TestCompatibility("payments-value", 9, avroV2)
	wantRestError(t, rec, "TestCompatibility(payments-value, 9, v2)", err, 40402)

	_, err = c.Register("payments-value", breaking, false)
	wantRestError(t, rec, "Register(payments-value, incompatible schema)", err, 409)
	_, err = c.Register("payments-value", schemaregistry.SchemaInfo{Schema: `{"type":"record","name":"Broken"}`}, false)
	wantRestError(t, rec, "Register(payments-value, Avro record without fields)", err, 42201)
	_, err = c.Register("payments-value", schemaregistry.SchemaInfo{Schema: `{}`, SchemaType: "XML"}, false)
	wantRestError(t, rec, "Register(payments-value, schemaType XML)", err, 42201)

	// A compatible change becomes version 2 with a new id.
	register("payments-value", avroV2, 4)
	_ = c.ClearLatestCaches()
	wantMeta(t, rec, "GetLatestSchemaMetadata(payments-value) after v2", c.GetLatestSchemaMetadata, "payments-value", 4, 2, paymentV2)
	wantMeta(t, rec, "GetSchemaMetadata(payments-value, 1)", func(s string) (schemaregistry.SchemaMetadata, error) { return c.GetSchemaMetadata(s, 1) }, "payments-value", 1, 1, paymentV1)
	_, err = c.GetSchemaMetadata("payments-value", 7)
	wantRestError(t, rec, "GetSchemaMetadata(payments-value, 7)", err, 40402)
	_, err = c.GetLatestSchemaMetadata("nope")
	wantRestError(t, rec, "GetLatestSchemaMetadata(nope)", err, 40401)

	wantVersions(t, rec, c, "payments-value", []int{1, 2})
	_, err = c.GetAllVersions("nope")
	wantRestError(t, rec, "GetAllVersions(nope)", err, 40401)
	wantSubjects(t, rec, c, []string{"events-value", "payments-copy", "payments-value", "shapes-value"})

	svs, err := c.GetSubjectsAndVersionsByID(1)
	slices.SortFunc(svs, func(a, b schemaregistry.SubjectAndVersion) int { return strings.Compare(a.Subject, b.Subject) })
	if want := []schemaregistry.SubjectAndVersion{{Subject: "payments-copy", Version: 1}, {Subject: "payments-value", Version: 1}}; err != nil || !slices.Equal(svs, want) {
		t.Errorf("GetSubjectsAndVersionsByID(1) = %v, %v; want %v\n  last exchange: %s", svs, err, want, rec.Last())
	}

	// Compatibility levels.
	_, err = c.GetCompatibility("payments-value")
	wantRestError(t, rec, "GetCompatibility(payments-value) without a subject level", err, 40408)
	wantLevel(t, rec, "GetDefaultCompatibility()", c.GetDefaultCompatibility, schemaregistry.Backward)
	wantLevel(t, rec, "UpdateCompatibility(payments-value, NONE)", func() (schemaregistry.Compatibility, error) {
		return c.UpdateCompatibility("payments-value", schemaregistry.None)
	}, schemaregistry.None)
	wantLevel(t, rec, "GetCompatibility(payments-value) after UpdateCompatibility", func() (schemaregistry.Compatibility, error) {
		return c.GetCompatibility("payments-value")
	}, schemaregistry.None)
	if cfg, err := c.GetConfig("payments-value", false); err != nil || cfg.CompatibilityLevel != schemaregistry.None {
		t.Errorf("GetConfig(payments-value, false) = %v, %v; want compatibilityLevel NONE\n  last exchange: %s", cfg.CompatibilityLevel.String(), err, rec.Last())
	}
	wantLevel(t, rec, "UpdateDefaultCompatibility(FULL)", func() (schemaregistry.Compatibility, error) {
		return c.UpdateDefaultCompatibility(schemaregistry.Full)
	}, schemaregistry.Full)
	wantLevel(t, rec, "GetDefaultCompatibility() after UpdateDefaultCompatibility", c.GetDefaultCompatibility, schemaregistry.Full)
	if cfg, err := c.GetConfig("events-value", true); err != nil || cfg.CompatibilityLevel != schemaregistry.Full {
		t.Errorf("GetConfig(events-value, defaultToGlobal) = %v, %v; want compatibilityLevel FULL\n  last exchange: %s", cfg.CompatibilityLevel.String(), err, rec.Last())
	}
	_, err = c.GetConfig("events-value", false)
	wantRestError(t, rec, "GetConfig(events-value, false) without a subject level", err, 40408)
	wantLevel(t, rec, "UpdateDefaultCompatibility(BACKWARD)", func() (schemaregistry.Compatibility, error) {
		return c.UpdateDefaultCompatibility(schemaregistry.Backward)
	}, schemaregistry.Backward)
	// Under NONE the change BACKWARD refused is compatible, and registers.
	if ok, err := c.TestCompatibility("payments-value", -1, breaking); err != nil || !ok {
		t.Errorf("TestCompatibility(payments-value, -1, adding a field without default) under NONE = %v, %v; want true\n  last exchange: %s", ok, err, rec.Last())
	}
	register("payments-value", breaking, 5)
	wantVersions(t, rec, c, "payments-value", []int{1, 2, 3})

	// Deletes: one version, then the subject soft, then permanently.
	if v, err := c.DeleteSubjectVersion("payments-value", 3, false); err != nil || v != 3 {
		t.Errorf("DeleteSubjectVersion(payments-value, 3, soft) = %d, %v; want 3\n  last exchange: %s", v, err, rec.Last())
	}
	wantVersions(t, rec, c, "payments-value", []int{1, 2})
	_, err = c.DeleteSubject("payments-value", true)
	wantRestError(t, rec, "DeleteSubject(payments-value, permanent) with live versions", err, 40405)
	if vs, err := c.DeleteSubject("payments-value", false); err != nil || !slices.Equal(vs, []int{1, 2}) {
		t.Errorf("DeleteSubject(payments-value, soft) = %v, %v; want [1 2]\n  last exchange: %s", vs, err, rec.Last())
	}
	_, err = c.GetAllVersions("payments-value")
	wantRestError(t, rec, "GetAllVersions(payments-value) after a soft delete", err, 40401)
	wantSubjects(t, rec, c, []string{"events-value", "payments-copy", "shapes-value"})
	wantMeta(t, rec, "GetSchemaMetadataIncludeDeleted(payments-value, 2, deleted)", func(s string) (schemaregistry.SchemaMetadata, error) {
		return c.GetSchemaMetadataIncludeDeleted(s, 2, true)
	}, "payments-value", 4, 2, paymentV2)
	// A soft-deleted version's id still resolves: consumers can read old data.
	_ = c.ClearCaches()
	if got, err := c.GetBySubjectAndID("", 4); err != nil || got.Schema != paymentV2 {
		t.Errorf("GetBySubjectAndID(\"\", 4) after a soft delete = %q, %v; want v2\n  last exchange: %s", got.Schema, err, rec.Last())
	}
	_, err = c.DeleteSubject("payments-value", false)
	wantRestError(t, rec, "DeleteSubject(payments-value, soft) twice", err, 40404)
	if vs, err := c.DeleteSubject("payments-value", true); err != nil || !slices.Equal(vs, []int{1, 2, 3}) {
		t.Errorf("DeleteSubject(payments-value, permanent) = %v, %v; want [1 2 3]\n  last exchange: %s", vs, err, rec.Last())
	}
	_, err = c.GetSchemaMetadataIncludeDeleted("payments-value", 1, true)
	wantRestError(t, rec, "GetSchemaMetadataIncludeDeleted(payments-value, 1, deleted) after a permanent delete", err, 40401)
	// Ids no version uses any more are gone; id 1 lives on in payments-copy.
	_ = c.ClearCaches()
	for _, id := range []int{4, 5} {
		_, err = c.GetBySubjectAndID("", id)
		wantRestError(t, rec, "GetBySubjectAndID(\"\", "+strconv.Itoa(id)+") after a permanent delete", err, 40403)
	}
	if got, err := c.GetBySubjectAndID("", 1); err != nil || got.Schema != paymentV1 {
		t.Errorf("GetBySubjectAndID(\"\", 1) after deleting one of its subjects = %q, %v; want v1\n  last exchange: %s", got.Schema, err, rec.Last())
	}
	// After a permanent delete the subject starts again at version 1.
	register("payments-value", avroV1, 1)
	wantMeta(t, rec, "GetLatestSchemaMetadata(payments-value) after re-registering", c.GetLatestSchemaMetadata, "payments-value", 1, 1, paymentV1)
}

func wantMeta(t *testing.T, rec *recorder, call string, get func(string) (schemaregistry.SchemaMetadata, error), subject string, id, version int, schema string) {
	t.Helper()
	m, err := get(subject)
	if err != nil || m.ID != id || m.Version != version || m.Subject != subject || m.Schema != schema || m.SchemaType != "" {
		t.Errorf("%s = {subject %q, version %d, id %d, schemaType %q, schema %q}, %v; want {subject %q, version %d, id %d, schema %q}\n  last exchange: %s",
			call, m.Subject, m.Version, m.ID, m.SchemaType, m.Schema, err, subject, version, id, schema, rec.Last())
	}
}

func wantVersions(t *testing.T, rec *recorder, c schemaregistry.Client, subject string, want []int) {
	t.Helper()
	if vs, err := c.GetAllVersions(subject); err != nil || !slices.Equal(vs, want) {
		t.Errorf("GetAllVersions(%q) = %v, %v; want %v\n  last exchange: %s", subject, vs, err, want, rec.Last())
	}
}

func wantSubjects(t *testing.T, rec *recorder, c schemaregistry.Client, want []string) {
	t.Helper()
	if subjects, err := c.GetAllSubjects(); err != nil || !slices.Equal(subjects, want) {
		t.Errorf("GetAllSubjects() = %q, %v; want %q\n  last exchange: %s", subjects, err, want, rec.Last())
	}
}

func wantLevel(t *testing.T, rec *recorder, call string, get func() (schemaregistry.Compatibility, error), want schemaregistry.Compatibility) {
	t.Helper()
	if got, err := get(); err != nil || got != want {
		t.Errorf("%s = %s, %v; want %s\n  last exchange: %s", call, got.String(), err, want.String(), rec.Last())
	}
}

func typeName(info schemaregistry.SchemaInfo) string {
	if info.SchemaType == "" {
		return "AVRO"
	}
	return info.SchemaType
}
