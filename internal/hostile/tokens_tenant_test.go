package hostile

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

// Token streams are read only by the requesting tenant, services and
// admins (docs/security.md, Tenant isolation): the relay stores a job's
// records under the tenant the ingress stamped on the job, and each
// user's token-reading permissions name its own tenant.
func TestTokenStreamsStayWithTheirTenant(t *testing.T) {
	t.Parallel()
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "INFER", Subjects: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	acmeKey := addUser(t, admin, semaq.UserAddRequest{Name: "acme-app", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"jobs.>"}})
	betaKey := addUser(t, admin, semaq.UserAddRequest{Name: "beta-app", Tenant: "beta", Role: semaq.RolePublisher, Subjects: []string{"jobs.>"}})
	betaReadKey := addUser(t, admin, semaq.UserAddRequest{Name: "beta-read", Tenant: "beta", Role: semaq.RoleReader, Subjects: []string{"results.beta.>"}})
	loneKey := addUser(t, admin, semaq.UserAddRequest{Name: "lone", Role: semaq.RolePublisher, Subjects: []string{"jobs.>"}})
	workKey := addUser(t, admin, semaq.UserAddRequest{Name: "gpu-1", Role: semaq.RoleWorker, Queues: []string{"INFER"}})
	svcKey := addUser(t, admin, semaq.UserAddRequest{Name: "door", Role: semaq.RoleService, Subjects: []string{"svc.>"}})

	acme := brokertest.ConnectKey(t, s, acmeKey)
	beta := brokertest.ConnectKey(t, s, betaKey)
	worker := brokertest.ConnectKey(t, s, workKey)

	// acme asks; the worker answers with a token stream.
	const id = "acme-req-1"
	if _, err := acme.Publish(ctx, "jobs.chat", []byte(`{"prompt":"hi"}`), client.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	// The dispatcher indexes the request a moment after its ack: wait for it.
	jobs, err := worker.Fetch(ctx, "INFER", client.FetchWait(10*time.Second))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %d jobs, %v", len(jobs), err)
	}
	if got := jobs[0].Header.Get(semaq.HdrTenant); got != "acme" {
		t.Fatalf("job tenant %q, want the publisher's, acme", got)
	}
	w, err := jobs[0].OpenTokenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "acme's secret"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := jobs[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}

	// The requesting tenant reads it, learning its tenant from the broker.
	read := func(c *client.Client, opts ...client.TokenReadOption) (string, error) {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		r, err := c.ReadTokens(rctx, id, opts...)
		if err != nil {
			return "", err
		}
		defer r.Close()
		res, err := r.Collect(rctx)
		if err != nil {
			return "", err
		}
		return res.Text, nil
	}
	if got, err := read(acme); err != nil || got != "acme's secret" {
		t.Fatalf("acme reads its own stream: %q, %v", got, err)
	}
	if info, err := acme.ServerInfo(ctx); err != nil || info.TokenTenant != "acme" || info.Tenant != "acme" || info.User != "acme-app" {
		t.Fatalf("INFO for acme-app: %+v, %v", info, err)
	}
	// A service reads every tenant's.
	if got, err := read(brokertest.ConnectKey(t, s, svcKey)); err != nil || got != "acme's secret" {
		t.Fatalf("a service reads acme's stream: %q, %v", got, err)
	}

	// Another tenant does not learn the stream exists...
	if st, err := beta.TokenStatus(ctx, id); err != nil || st.Known {
		t.Fatalf("beta asks the status of acme's stream: %+v, %v; want unknown", st, err)
	}
	if st, err := acme.TokenStatus(ctx, id); err != nil || !st.Known || !st.Ended || st.Records != 2 {
		t.Fatalf("acme asks the status of its stream: %+v, %v", st, err)
	}
	// ...and cannot read it by naming acme.
	if _, err := read(beta, client.ForTenant("acme")); !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("beta reads acme's stream naming acme: %v, want refused", err)
	}
	// Nor live: the server refuses the subscription, and the reader says
	// so at once rather than waiting for records that never come.
	lr, err := beta.ReadTokens(ctx, id, client.ForTenant("acme"), client.WithLiveStart())
	if err == nil {
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = lr.Next(lctx)
		lcancel()
		lr.Close()
	}
	if !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("beta reads acme's stream live naming acme: %v, want refused", err)
	}
	// Reading under its own tenant finds nothing to read.
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	r, err := beta.ReadTokens(short, id)
	if err == nil {
		_, err = r.Next(short)
		r.Close()
	}
	scancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("beta reading id %s under its own tenant: %v, want nothing (a wait)", id, err)
	}

	// Raw NATS: every way around it the server refuses.
	for _, key := range []string{betaKey, betaReadKey, loneKey} {
		p := newProbe(t, s, key)
		for subj, want := range map[string]bool{
			"$JS.API.CONSUMER.CREATE.SQ_TOKENS.x.$SQ.tok.acme." + id + ".*": true,
			"$JS.API.CONSUMER.CREATE.SQ_TOKENS.x.$SQ.tok.*." + id + ".*":    true, // '*' as a literal tenant
			"$JS.API.CONSUMER.CREATE.SQ_TOKENS.x.$SQ.tok.*.*.*":             true,
			"$JS.API.CONSUMER.CREATE.SQ_TOKENS.x.$SQ.tok.>":                 true,
			"$JS.API.CONSUMER.CREATE.SQ_TOKENS.x":                           true, // no filter in the subject
			"$JS.API.STREAM.MSG.GET.SQ_TOKENS":                              true,
			"$JS.API.DIRECT.GET.SQ_TOKENS.$SQ.tok.acme." + id + ".end":      true,
		} {
			if got := p.pub(t, subj); got != want {
				t.Errorf("%s: publish %s refused=%v, want %v", key[:12], subj, got, want)
			}
		}
		for subj, want := range map[string]bool{
			semaq.TokenLiveFilter("acme", id): true,
			"$SQ.w.$tokl.*." + id + ".*":      true,
			"$SQ.w.$tokl.>":                   true,
			"$SQ.tok.>":                       true,
		} {
			if got := p.sub(t, subj); got != want {
				t.Errorf("%s: subscribe %s refused=%v, want %v", key[:12], subj, got, want)
			}
		}
	}
	// Each may read under its own tenant's token (the lone publisher's is
	// the no-tenant one).
	for key, tenant := range map[string]string{betaKey: "beta", betaReadKey: "beta", loneKey: semaq.TokenNoTenant} {
		p := newProbe(t, s, key)
		if p.pub(t, "$JS.API.CONSUMER.CREATE.SQ_TOKENS.x."+semaq.TokenSubjectFilter(tenant, "some-id")) ||
			p.sub(t, semaq.TokenLiveFilter(tenant, "some-id")) {
			t.Errorf("%s may not read its own tenant's (%s) token streams", key[:12], tenant)
		}
	}

	// A writer no job binds writes under its own tenant: a worker of
	// tenant beta may not claim a stream in acme's name (a worker without
	// a tenant serves every tenant's jobs, and may).
	betaWorkKey := addUser(t, admin, semaq.UserAddRequest{Name: "beta-gpu", Tenant: "beta", Role: semaq.RoleWorker, Queues: []string{"INFER"}})
	wnc, err := dialKey(t, s, betaWorkKey)
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	m := nats.NewMsg(semaq.TokenWriteChunkSubject("forged-1"))
	m.Header.Set(semaq.HdrTokenKey, "forger-key-0123456789")
	m.Header.Set(semaq.HdrTenant, "acme")
	m.Data = semaq.AppendTokenChunk(nil, &semaq.TokenChunk{Seq: 1, N: 1, Text: "fake"})
	resp, err := wnc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var refusal semaq.ErrorReply
	if err := json.Unmarshal(resp.Data, &refusal); err != nil || refusal.Error == nil ||
		refusal.Error.ErrCode != semaq.ErrCodeTokenWriter || !strings.Contains(refusal.Error.Description, `tenant "acme"`) {
		t.Fatalf("beta's worker claiming a stream for acme: %s, want refused naming the tenant", resp.Data)
	}
}
