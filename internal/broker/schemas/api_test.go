package schemas

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/semaq"
)

// Every registry error reaches clients with its Confluent code as err_code
// and that code's HTTP status, matching the semaq sentinel of that code.
func TestSchemaAPIErrorMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reg  *registry.Error
		want *semaq.APIError
	}{
		{registry.ErrSubjectNotFound, semaq.ErrSchemaSubjectNotFound},
		{registry.ErrVersionNotFound, semaq.ErrSchemaVersionNotFound},
		{registry.ErrSchemaNotFound, semaq.ErrSchemaIDNotFound},
		{registry.ErrSubjectSoftDeleted, semaq.ErrSchemaSubjectSoftDeleted},
		{registry.ErrSubjectNotSoftDeleted, semaq.ErrSchemaSubjectNotSoftDeleted},
		{registry.ErrVersionSoftDeleted, semaq.ErrSchemaVersionSoftDeleted},
		{registry.ErrVersionNotSoftDeleted, semaq.ErrSchemaVersionNotSoftDeleted},
		{registry.ErrSubjectCompatNotConfigured, semaq.ErrSchemaCompatNotConfigured},
		{registry.ErrBindingNotFound, semaq.ErrSchemaBindingNotFound},
		{registry.ErrIncompatible, semaq.ErrSchemaIncompatible},
		{registry.ErrUnprocessable, semaq.ErrSchemaUnprocessable},
		{registry.ErrInvalidSchema, semaq.ErrSchemaInvalid},
		{registry.ErrInvalidVersion, semaq.ErrSchemaInvalidVersion},
		{registry.ErrInvalidCompatibility, semaq.ErrSchemaInvalidCompatibility},
		{registry.ErrReferenceExists, semaq.ErrSchemaReferenceExists},
		{registry.ErrInvalidSubject, semaq.ErrSchemaInvalidSubject},
		{registry.ErrInvalidBinding, semaq.ErrSchemaInvalidBinding},
		{registry.ErrStore, semaq.ErrSchemaStore},
		{registry.ErrTimeout, semaq.ErrSchemaTimeout},
	} {
		err := &registry.Error{Code: tc.reg.Code, Message: "details of " + tc.reg.Message}
		got := apiError(fmt.Errorf("wrapped: %w", err))
		if !errors.Is(got, tc.want) || got.Code != tc.want.Code || got.Description != err.Message {
			t.Errorf("registry %d: %+v, want code %d err_code %d and the registry's message", tc.reg.Code, got, tc.want.Code, tc.want.ErrCode)
		}
	}
	ae := semaq.NewAPIError(semaq.ErrBadRequest, "bad")
	if got := apiError(ae); got != ae {
		t.Errorf("an API error changed: %+v", got)
	}
	if got := apiError(errors.New("boom")); !errors.Is(got, semaq.ErrUnavailable) {
		t.Errorf("another error: %+v, want unavailable", got)
	}
}

// Without a registry every schema subject answers 503 at once.
func TestSchemaAPIWithoutRegistry(t *testing.T) {
	t.Parallel()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := New(Deps{Log: slog.New(slog.DiscardHandler)})
	handlers := s.Handlers()
	if len(handlers) != 12 {
		t.Errorf("%d schema handlers, want 12", len(handlers))
	}
	for subj, h := range handlers {
		if _, err := nc.Subscribe(subj, h); err != nil {
			t.Fatal(err)
		}
	}
	for subj := range handlers {
		m, err := nc.Request(subj, []byte(`{}`), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subj, err)
		}
		var r semaq.ErrorReply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Error == nil || !errors.Is(r.Error, semaq.ErrUnavailable) ||
			r.Error.Code != 503 || r.Error.Description != "schema registry not running" {
			t.Errorf("%s: %s", subj, m.Data)
		}
	}
}
