package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The model registry with --auth (docs/models.md, Rights): every role
// reads it and follows its events, only admins change it, workers and
// services report figures; no client forges an event or the revision a
// request was bound at; and the worst values of each field are refused.
func TestModelRegistryAuth(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "MA", Subjects: []string{"ai.infer.ma"}}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"ai.infer.>"}},
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"ai.infer.>"}},
		{Name: "svc", Role: semaq.RoleService, Subjects: []string{"ai.infer.>"}},
		{Name: "gpu-1", Role: semaq.RoleWorker, Queues: []string{"MA"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		keys[u.Name] = r.Key
	}
	as := func(name string) *client.Client { return brokertest.ConnectKey(t, s, keys[name]) }
	reader, pub, svc, worker := as("acme-read"), as("acme-pub"), as("svc"), as("gpu-1")

	// The reader follows the lifecycle events.
	rnc, err := nats.Connect(s.ClientURL(), nats.UserInfo("acme-read", keys["acme-read"]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+"acme-read"))
	if err != nil {
		t.Fatal(err)
	}
	defer rnc.Close()
	events, err := rnc.SubscribeSync(semaq.ModelEventPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if err := rnc.Flush(); err != nil {
		t.Fatal(err)
	}

	ref := semaq.ModelRef{Model: "ma", Version: "v1"}
	if _, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: ref}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: ref, Force: true}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 3 {
		m, err := events.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("the reader's lifecycle events, after %v: %v", seen, err)
		}
		var ev semaq.ModelEvent
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Model != "ma" {
			t.Fatalf("event %s: %s", m.Subject, m.Data)
		}
		seen = append(seen, ev.Event)
	}
	if strings.Join(seen, " ") != "ModelRegistered ModelValidated ModelDeployed" {
		t.Fatalf("events %v", seen)
	}

	for _, c := range []*client.Client{reader, pub, svc, worker} {
		l, err := c.ModelList(ctx)
		if err != nil || len(l.Models) != 1 || l.Models[0].Active != "v1" {
			t.Fatalf("a user lists the registry: %v %+v", err, l)
		}
	}
	forbidden := map[string]error{}
	for name, c := range map[string]*client.Client{"reader": reader, "publisher": pub, "service": svc, "worker": worker} {
		_, forbidden[name+" register"] = c.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "ma", Version: "evil"}})
		_, forbidden[name+" promote"] = c.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: ref, Force: true})
		_, forbidden[name+" rollback"] = c.ModelRollback(ctx, "ma")
		_, forbidden[name+" drain"] = c.ModelDrain(ctx, "ma", "v1", 0, nil)
	}
	_, forbidden["reader report"] = reader.ModelReport(ctx, semaq.ModelReportRequest{ModelRef: ref})
	_, forbidden["publisher report"] = pub.ModelReport(ctx, semaq.ModelReportRequest{ModelRef: ref})
	for what, err := range forbidden {
		if !errors.Is(err, semaq.ErrForbidden) {
			t.Errorf("%s: %v, want ErrForbidden", what, err)
		}
	}
	for name, c := range map[string]*client.Client{"worker": worker, "service": svc} {
		if _, err := c.ModelReport(ctx, semaq.ModelReportRequest{ModelRef: ref, ModelFigures: semaq.ModelFigures{P95Ms: 1}}); err != nil {
			t.Errorf("%s reports figures: %v", name, err)
		}
	}
	if info, _ := admin.ModelGet(ctx, "ma"); len(info.Versions) != 1 || info.Active != "v1" {
		t.Fatalf("the registry after the refusals: %+v", info)
	}

	// A request is bound by the broker: the revision header is its own.
	_, err = pub.Publish(ctx, "ai.infer.ma", []byte("x"), client.WithModel("ma"), client.WithHeader(semaq.HdrModelRevision, "999999"))
	if !errors.Is(err, semaq.ErrEnvelope) {
		t.Fatalf("a publisher setting %s: %v", semaq.HdrModelRevision, err)
	}
	if _, err := pub.Publish(ctx, "ai.infer.ma", []byte("x"), client.WithModel("ma"), client.WithModelVersion("nope")); !errors.Is(err, semaq.ErrModelNotFound) {
		t.Fatalf("a request pinned to an unknown version: %v", err)
	}
	// No client publishes an event, not even an admin: only the broker
	// writes SQ_MODEL_EVENTS.
	for _, name := range []string{"acme-pub", "svc"} {
		errs := make(chan error, 4)
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(name, keys[name]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+name),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
		if err != nil {
			t.Fatal(err)
		}
		subj := semaq.ModelEventSubject("ma", semaq.ModelDeployed)
		if err := nc.Publish(subj, []byte(`{"model":"ma","event":"ModelDeployed","version":"evil"}`)); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, name, errs, subj)
		nc.Close()
	}
	for {
		m, err := events.NextMsg(300 * time.Millisecond)
		if err != nil {
			break
		}
		if strings.Contains(string(m.Data), "evil") {
			t.Fatalf("a forged event reached the reader: %s", m.Data)
		}
	}

	// The worst values: each refused with ErrBadModel, the registry unchanged.
	long := strings.Repeat("m", 200<<10)
	labels := map[string]string{}
	for i := range semaq.MaxModelLabels + 1 {
		labels[string(rune('a'+i))] = "x"
	}
	hostile := map[string]func() error{
		"a 200 KB name": func() error {
			_, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: long, Version: "v1"}})
			return err
		},
		"a version that breaks the worker's label list": func() error {
			_, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "ma", Version: "v1,v2"}})
			return err
		},
		"too many labels": func() error {
			_, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "ma", Version: "v2"}, Labels: labels})
			return err
		},
		"a label with a status line": func() error {
			_, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "ma", Version: "v2"},
				Labels: map[string]string{"q": "fp8\r\nNATS/1.0 503"}})
			return err
		},
		"a canary of 150 %": func() error {
			_, err := admin.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: ref, CanaryPercent: 150})
			return err
		},
		"sticky by nothing known": func() error {
			_, err := admin.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: ref, CanaryPercent: 5, Sticky: "ip"})
			return err
		},
		"negative figures": func() error {
			_, err := admin.ModelReport(ctx, semaq.ModelReportRequest{ModelRef: ref, ModelFigures: semaq.ModelFigures{P95Ms: -1}})
			return err
		},
		"a negative gate": func() error {
			_, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "ma", Version: "v3"}, Gate: &semaq.ModelGate{P95DriftPct: -8}})
			return err
		},
	}
	for what, f := range hostile {
		if err := f(); !errors.Is(err, semaq.ErrBadModel) {
			t.Errorf("%s: %v, want ErrBadModel", what, err)
		}
	}
	if info, _ := admin.ModelGet(ctx, "ma"); len(info.Versions) != 1 {
		t.Fatalf("the registry after the hostile calls: %+v", info.Versions)
	}
}
