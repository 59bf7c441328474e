package broker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// registerREST registers a schema through the Confluent-compatible REST API
// and returns its id.
func registerREST(t *testing.T, s *broker.Server, subject, schemaType, text string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": text, "schemaType": schemaType})
	resp, err := http.Post("http://"+s.HTTPAddr()+"/subjects/"+subject+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("register %s: %d %s", subject, resp.StatusCode, b)
	}
	var out struct{ ID int }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.ID
}

func frame(id int, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	return append(b, payload...)
}

const requestSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["model", "messages"],
  "properties": {
    "model": {"type": "string"},
    "messages": {"type": "array", "items": {
      "type": "object", "required": ["role", "content"],
      "properties": {"role": {"enum": ["system", "user", "assistant"]}, "content": {"type": "string"}}}},
    "max_tokens": {"type": "integer", "minimum": 1}
  }
}`

func TestSchemaOnWriteJSON(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	id := registerREST(t, s, "inference-request", "JSON", requestSchema)
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "NOSCHEMA", Subjects: []string{"x.>"}, Schema: "no-such-subject"}); !errors.Is(err, semaq.ErrSchemaNotFound) {
		t.Fatalf("stream bound to a missing registry subject: %v", err)
	}
	info, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Schema: "inference-request"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Schema != "inference-request" {
		t.Fatalf("stream info schema = %q", info.Config.Schema)
	}

	good := `{"model":"llama3","messages":[{"role":"user","content":"hi"}],"max_tokens":64}`
	if _, err := c.Publish(ctx, "ai.req", []byte(good)); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
	if _, err := c.Publish(ctx, "ai.req", frame(id, []byte(good))); err != nil {
		t.Fatalf("framed valid request refused: %v", err)
	}
	for _, bad := range []struct{ payload, says string }{
		{`{"messages":[]}`, "model"},
		{`{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "/messages/0/role"},
		{`{"model":"m","messages":[],"max_tokens":0}`, "/max_tokens"},
		{`{"model":`, "json"},
	} {
		_, err := c.Publish(ctx, "ai.req", []byte(bad.payload))
		if !errors.Is(err, semaq.ErrSchema) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("payload %s: %v, want ErrSchema naming %s", bad.payload, err, bad.says)
		}
	}
	other := registerREST(t, s, "other", "JSON", `{"type":"object"}`)
	if _, err := c.Publish(ctx, "ai.req", frame(other, []byte(good))); !errors.Is(err, semaq.ErrSchema) || !strings.Contains(err.Error(), "not a version of") {
		t.Errorf("framed with another subject's id: %v", err)
	}
	if n := messages(t, c, "AI"); n != 2 {
		t.Fatalf("stream holds %d messages, want the 2 valid ones", n)
	}
	sub, err := c.Subscribe(ctx, "ai.req", client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(semaq.HdrSchemaID); got != strconv.Itoa(id) {
		t.Fatalf("stored AI-Schema-Id = %q, want %d", got, id)
	}

	// A new compatible version is enforced from the next publish on,
	// without restart: v2 drops the minimum, so max_tokens 0 passes now.
	v2 := strings.Replace(requestSchema, `"max_tokens": {"type": "integer", "minimum": 1}`, `"max_tokens": {"type": "integer"}`, 1)
	id2 := registerREST(t, s, "inference-request", "JSON", v2)
	if _, err := c.Publish(ctx, "ai.req", []byte(`{"model":"m","messages":[],"max_tokens":0}`)); err != nil {
		t.Fatalf("payload valid under the new version refused: %v", err)
	}
	last, err := c.Subscribe(ctx, "ai.req", client.WithStartSequence(3), client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer last.Close()
	if m, err := last.Next(ctx); err != nil || m.Header.Get(semaq.HdrSchemaID) != strconv.Itoa(id2) {
		t.Fatalf("message after v2 carries AI-Schema-Id %q (err %v), want %d", m.Header.Get(semaq.HdrSchemaID), err, id2)
	}
}

const avroRequest = `{"type":"record","name":"Request","namespace":"ai","fields":[
  {"name":"model","type":"string"},
  {"name":"max_tokens","type":"int"}]}`

func TestSchemaOnWriteAvroNeedsID(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	id := registerREST(t, s, "avro-request", "AVRO", avroRequest)
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AV", Subjects: []string{"av.>"}, Schema: "avro-request"}); err != nil {
		t.Fatal(err)
	}
	sch := avro.MustParse(avroRequest)
	payload, err := avro.Marshal(sch, map[string]any{"model": "llama3", "max_tokens": 128})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "av.req", payload); !errors.Is(err, semaq.ErrSchema) || !strings.Contains(err.Error(), "need a schema id") {
		t.Fatalf("unframed Avro without id: %v", err)
	}
	if _, err := c.Publish(ctx, "av.req", frame(id, payload)); err != nil {
		t.Fatalf("framed Avro refused: %v", err)
	}
	if _, err := c.Publish(ctx, "av.req", payload, client.WithHeader(semaq.HdrSchemaID, strconv.Itoa(id))); err != nil {
		t.Fatalf("Avro with AI-Schema-Id refused: %v", err)
	}
	if _, err := c.Publish(ctx, "av.req", frame(id, payload[:len(payload)-1])); !errors.Is(err, semaq.ErrSchema) {
		t.Fatalf("truncated Avro: %v", err)
	}
	if _, err := c.Publish(ctx, "av.req", frame(id, payload), client.WithHeader(semaq.HdrSchemaID, strconv.Itoa(id+1))); !errors.Is(err, semaq.ErrSchema) {
		t.Fatalf("frame and header disagree: %v", err)
	}
	if n := messages(t, c, "AV"); n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
	// Deleting the stream removes its bindings.
	if err := c.DeleteStream(ctx, "AV"); err != nil {
		t.Fatal(err)
	}
	if bs := broker.Registry(s).Bindings(); len(bs) != 0 {
		t.Fatalf("bindings left after stream delete: %v", bs)
	}
}
