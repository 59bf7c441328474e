package hostile

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The audit log (docs/security.md, Audit) with auth on: user and key
// changes are recorded without key material, only admins list records,
// and nobody reads or writes SQ_AUDIT around the broker.

func TestAuditUserChangesHoldNoKey(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := addUser(t, admin, semaq.UserAddRequest{Name: "alice", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"results.acme.>"}})
	rotated, err := admin.RotateKey(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RemoveUser(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RemoveUser(ctx, "alice"); !errors.Is(err, semaq.ErrUserNotFound) {
		t.Fatalf("removing a removed user: %v", err)
	}
	resp, err := admin.Audit(ctx, semaq.AuditListRequest{Op: "user"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := admin.Audit(ctx, semaq.AuditListRequest{Op: "key"})
	if err != nil {
		t.Fatal(err)
	}
	recs := append(resp.Records, keys.Records...)
	if len(recs) != 4 {
		t.Fatalf("%d user and key records, want 4: %+v", len(recs), recs)
	}
	byOp := map[string][]semaq.AuditRecord{}
	for _, r := range recs {
		if r.Target != "alice" {
			t.Errorf("record %s targets %q", r.Op, r.Target)
		}
		if r.Principal.Who != "user" || r.Principal.User != "admin" || r.Principal.Role != semaq.RoleAdmin {
			t.Errorf("record %s: principal %+v, want the admin", r.Op, r.Principal)
		}
		byOp[r.Op] = append(byOp[r.Op], r)
	}
	k1, _ := identity.ParseKey(first)
	k2, _ := identity.ParseKey(rotated.Key)
	var added, before, after semaq.UserInfo
	decode := func(raw json.RawMessage, v *semaq.UserInfo) {
		t.Helper()
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	decode(byOp[semaq.AuditOpUserAdd][0].After, &added)
	decode(byOp[semaq.AuditOpKeyRotate][0].Before, &before)
	decode(byOp[semaq.AuditOpKeyRotate][0].After, &after)
	if added.Name != "alice" || added.Role != semaq.RoleReader || added.Tenant != "acme" || len(added.Keys) != 1 || added.Keys[0].ID != k1.ID {
		t.Errorf("user.add after: %+v", added)
	}
	if len(before.Keys) != 1 || before.Keys[0].ID != k1.ID || len(after.Keys) != 1 || after.Keys[0].ID != k2.ID {
		t.Errorf("key.rotate: before %+v, after %+v", before.Keys, after.Keys)
	}
	rms := byOp[semaq.AuditOpUserRemove]
	if len(rms) != 2 || rms[0].Outcome != semaq.AuditOK || rms[0].Before == nil || rms[0].After != nil ||
		rms[1].Outcome != semaq.AuditRefused || !strings.Contains(rms[1].Error, "not found") || rms[1].Before != nil || rms[1].After != nil {
		t.Errorf("user.rm records: %+v", rms)
	}

	// No key, and no secret in any encoding, anywhere in the stream's bytes.
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	js, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, reserved.AuditStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, reserved.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	var raw strings.Builder
	for n := uint64(0); n < info.CachedInfo().State.Msgs; n++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		raw.Write(m.Data())
		for k, vs := range m.Headers() {
			raw.WriteString(k + strings.Join(vs, ""))
		}
	}
	if !strings.Contains(raw.String(), k2.ID) {
		t.Fatal("the raw records do not hold the rotated key's ID: the scan read nothing useful")
	}
	adminKey := brokertest.AdminKey(t, s)
	for _, secret := range []string{first, rotated.Key, adminKey} {
		k, _ := identity.ParseKey(secret)
		for _, form := range []string{secret, base64.RawURLEncoding.EncodeToString(k.Secret), base64.StdEncoding.EncodeToString(k.Secret)} {
			if strings.Contains(raw.String(), form) {
				t.Fatalf("SQ_AUDIT holds a key of %s", k.Name)
			}
		}
	}
}

// Only the admin role reaches $SQ.API.AUDIT.LIST; nobody, admin
// included, reads SQ_AUDIT directly or writes into it.
func TestAuditClosedToNonAdmins(t *testing.T) {
	s, admin := authBroker(t)
	brokertest.AddStream(t, admin, "INF", "ai.inference.>")
	keys := map[string]string{
		"publisher": addUser(t, admin, semaq.UserAddRequest{Name: "ingest", Role: semaq.RolePublisher, Subjects: []string{"ai.inference.>"}}),
		"reader":    addUser(t, admin, semaq.UserAddRequest{Name: "alice", Role: semaq.RoleReader, Subjects: []string{"ai.inference.>"}}),
		"worker":    addUser(t, admin, semaq.UserAddRequest{Name: "gpu", Role: semaq.RoleWorker, Queues: []string{"*"}}),
		"service":   addUser(t, admin, semaq.UserAddRequest{Name: "svc", Role: semaq.RoleService, Subjects: []string{"ai.inference.>"}}),
	}
	around := []string{
		reserved.AuditPrefix + semaq.AuditOpUserAdd, // a forged record
		"$JS.API.DIRECT.GET." + reserved.AuditStream,
		"$JS.API.DIRECT.GET." + reserved.AuditStream + "." + reserved.AuditPrefix + semaq.AuditOpUserAdd,
		"$JS.API.STREAM.MSG.GET." + reserved.AuditStream,
		"$JS.API.CONSUMER.CREATE." + reserved.AuditStream,
		"$JS.API.CONSUMER.CREATE." + reserved.AuditStream + ".c",
		"$JS.API.CONSUMER.CREATE." + reserved.AuditStream + ".c." + reserved.AuditPrefix + ">",
		"$JS.API.CONSUMER.DURABLE.CREATE." + reserved.AuditStream + ".c",
		"$JS.API.STREAM.DELETE." + reserved.AuditStream,
		"$JS.API.STREAM.PURGE." + reserved.AuditStream,
		"$JS.API.STREAM.UPDATE." + reserved.AuditStream,
	}
	for role, key := range keys {
		t.Run(role, func(t *testing.T) {
			p := newProbe(t, s, key)
			for _, subj := range append([]string{semaq.APIAuditList}, around...) {
				if !p.pub(t, subj) {
					t.Errorf("a %s may publish on %s", role, subj)
				}
			}
			c := brokertest.ConnectKey(t, s, key)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Audit(ctx, semaq.AuditListRequest{}); err == nil {
				t.Errorf("a %s lists the audit", role)
			}
		})
	}
	t.Run("admin", func(t *testing.T) {
		p := newProbe(t, s, brokertest.AdminKey(t, s))
		if p.pub(t, semaq.APIAuditList) {
			t.Error("the admin may not list the audit")
		}
		for _, subj := range around {
			if !p.pub(t, subj) {
				t.Errorf("the admin may publish on %s", subj)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := admin.Audit(ctx, semaq.AuditListRequest{Op: semaq.AuditOpUserAdd})
		if err != nil || len(resp.Records) != len(keys) {
			t.Fatalf("admin list: %v, %+v", err, resp)
		}
	})
}

// Over the HTTP door the key names the user: an admin's registry write is
// recorded under its name; a reader's is refused before it reaches the
// registry (403) and leaves no record.
func TestAuditHTTPRecordsTheKeysUser(t *testing.T) {
	s, admin := authBroker(t)
	reader := addUser(t, admin, semaq.UserAddRequest{Name: "alice", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"x.>"}})
	// status sends one request with key as bearer and returns its status.
	status := func(method, path, key, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+s.HTTPAddr()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	post := func(key string) int {
		return status("POST", "/subjects/orders-value/versions", key, `{"schema":"{\"type\":\"object\"}","schemaType":"JSON"}`)
	}
	if code := post(reader); code != http.StatusForbidden {
		t.Fatalf("a reader's registry write: %d", code)
	}
	if code := post(brokertest.AdminKey(t, s)); code != http.StatusOK {
		t.Fatalf("the admin's registry write: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := admin.Audit(ctx, semaq.AuditListRequest{Op: "schema"})
	if err != nil {
		t.Fatal(err)
	}
	want := semaq.AuditPrincipal{Who: "user", User: "admin", Role: semaq.RoleAdmin}
	if len(resp.Records) != 1 || resp.Records[0].Principal != want || resp.Records[0].Door != "http" || resp.Records[0].Outcome != semaq.AuditOK {
		t.Fatalf("records: %+v", resp.Records)
	}
	// The admin's two changes: alice's creation over NATS, the schema.
	if byUser, err := admin.Audit(ctx, semaq.AuditListRequest{User: "admin"}); err != nil || len(byUser.Records) != 2 {
		t.Fatalf("--user admin: %v %+v", err, byUser)
	}
	// GET /api/v1/audit: the admin's, a prompt 403 for anyone else.
	list := func(key string) int { return status("GET", "/api/v1/audit", key, "") }
	if code := list(reader); code != http.StatusForbidden {
		t.Errorf("a reader's GET /api/v1/audit: %d", code)
	}
	if code := list(brokertest.AdminKey(t, s)); code != http.StatusOK {
		t.Errorf("the admin's GET /api/v1/audit: %d", code)
	}
}

// With auth on, a change is recorded under the name of the user who asked
// for it, with its tenant and role, whichever admin that is; a refused
// change too.
func TestAuditNamesTheUser(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ops := brokertest.ConnectKey(t, s, addUser(t, admin, semaq.UserAddRequest{Name: "ops", Tenant: "acme", Role: semaq.RoleAdmin}))
	if _, err := ops.AddStream(ctx, semaq.StreamConfig{Name: "OPS", Subjects: []string{"ops.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := ops.DeleteStream(ctx, "NOT_THERE"); err == nil {
		t.Fatal("deleting a stream that does not exist worked")
	}
	resp, err := admin.Audit(ctx, semaq.AuditListRequest{User: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	want := semaq.AuditPrincipal{Who: "user", User: "ops", Tenant: "acme", Role: semaq.RoleAdmin}
	if len(resp.Records) != 2 {
		t.Fatalf("ops's records: %+v", resp.Records)
	}
	for i, op := range []string{semaq.AuditOpStreamCreate, semaq.AuditOpStreamDelete} {
		r := resp.Records[i]
		if r.Principal != want || r.Op != op {
			t.Errorf("record %d: %s by %+v, want %s by %+v", i, r.Op, r.Principal, op, want)
		}
	}
	if resp.Records[1].Outcome != semaq.AuditRefused || resp.Records[1].Target != "NOT_THERE" {
		t.Errorf("the refused delete: %+v", resp.Records[1])
	}
}
