package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/logtest"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/semaq"
)

// apiCall makes one request of the management API on nc, decoding the
// answer into out, or its error.
func apiCall(ctx context.Context, t *testing.T, nc *nats.Conn, subj string, req, out any) error {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.RequestWithContext(ctx, subj, body)
	if err != nil {
		return err
	}
	if e := replyError(m); e != nil {
		return e
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("%s: %v: %s", subj, err, m.Data)
		}
	}
	return nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// lastStored is the last message stored on subject.
func lastStored(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("reading %s: %v", subject, err)
	}
	return m
}

// policyNode is a broker of its own for a policy test: an SDK client, an
// operator connection and its JetStream (to read what was stored), a
// stream DEMO on demo.>, and a context bounded by d.
type policyNode struct {
	s   *broker.Server
	c   *client.Client
	nc  *nats.Conn
	js  jetstream.JetStream
	ctx context.Context
}

func newPolicyNode(t *testing.T, d time.Duration, opts ...func(*broker.Config)) *policyNode {
	t.Helper()
	n := &policyNode{s: brokertest.Start(t, opts...)}
	n.c = brokertest.Connect(t, n.s)
	var err error
	if n.nc, err = brokertest.DialOperator(n.s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.nc.Close)
	if n.js, err = jetstream.New(n.nc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	n.ctx = ctx
	brokertest.AddStream(t, n.c, "DEMO", "demo.>")
	return n
}

func TestPolicyIngressMaskBlockTokenizeRestore(t *testing.T) {
	n := newPolicyNode(t, 30*time.Second)
	c, nc, js, ctx := n.c, n.nc, n.js, n.ctx

	var info semaq.PolicyInfo
	rule := semaq.PolicyRule{Name: "pii-in", Subjects: []string{"demo.masked.>"}, Redact: []string{"email", "card"}, Paths: []string{"messages.*.content"}}
	if err := apiCall(ctx, t, nc, semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: rule}, &info); err != nil {
		t.Fatal(err)
	}
	if info.Revision == 0 || info.Name != "pii-in" {
		t.Fatalf("add: %+v", info)
	}
	if err := apiCall(ctx, t, nc, semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: rule}, nil); !errors.Is(err, semaq.ErrPolicyExists) {
		t.Fatalf("add twice: %v", err)
	}

	// Mask, at the selected path only.
	payload := `{"model":"m","messages":[{"role":"user","content":"mail ann@example.com, card 4111 1111 1111 1111"}],"note":"bob@example.com"}`
	if _, err := c.Publish(ctx, "demo.masked.in", []byte(payload)); err != nil {
		t.Fatal(err)
	}
	got := string(lastStored(ctx, t, js, "DEMO", "demo.masked.in").Data)
	if strings.Contains(got, "ann@example.com") || strings.Contains(got, "4111") || !strings.Contains(got, "[EMAIL]") || !strings.Contains(got, "[CARD]") {
		t.Fatalf("stored %s", got)
	}
	if !strings.Contains(got, "bob@example.com") {
		t.Fatalf("a value outside the paths was redacted: %s", got)
	}

	// Block: refused, naming type and path, never the value.
	block := semaq.PolicyRule{Name: "no-ids", Subjects: []string{"demo.block.>"}, Redact: []string{"cn-id"}, Action: semaq.PIIBlock}
	if err := apiCall(ctx, t, nc, semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: block}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Publish(ctx, "demo.block.in", []byte(`{"q":"my id is 11010519491231002X"}`))
	if !errors.Is(err, semaq.ErrPIIBlocked) || strings.Contains(err.Error(), "11010519491231002X") || !strings.Contains(err.Error(), "/q") || !strings.Contains(err.Error(), "cn-id") {
		t.Fatalf("blocked publish: %v", err)
	}

	// Tokenize and restore, by the request's id.
	tok := semaq.PolicyRule{Name: "tok", Subjects: []string{"demo.tok.>"}, Redact: []string{"email"}, Action: semaq.PIITokenize}
	if err := apiCall(ctx, t, nc, semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: tok}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "demo.tok.in", []byte(`{"q":"write to ann@example.com and bob@example.com, then ann@example.com"}`), client.WithMsgID("req-1")); err != nil {
		t.Fatal(err)
	}
	m := lastStored(ctx, t, js, "DEMO", "demo.tok.in")
	if string(m.Data) != `{"q":"write to <EMAIL_1> and <EMAIL_2>, then <EMAIL_1>"}` || m.Header.Get(semaq.HdrPIIScope) != "r.req-1" {
		t.Fatalf("stored %s, scope %q", m.Data, m.Header.Get(semaq.HdrPIIScope))
	}
	res, err := c.RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: "r.req-1", Text: "Sent to <EMAIL_2> and <EMAIL_1>; <EMAIL_9> stays."})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Sent to bob@example.com and ann@example.com; <EMAIL_9> stays." || res.Restored != 2 {
		t.Fatalf("restored %+v", res)
	}
	if _, err := c.RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: "r.req-1", Tenant: "other", Text: "<EMAIL_1>"}); !errors.Is(err, semaq.ErrVaultNotFound) {
		t.Fatalf("another tenant's restore: %v", err)
	}

	// Removed, the rule no longer applies.
	if err := apiCall(ctx, t, nc, semaq.APIPolicyDelete, semaq.PolicyNameRequest{Name: "no-ids"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "demo.block.in", []byte(`{"q":"my id is 11010519491231002X"}`)); err != nil {
		t.Fatalf("after delete: %v", err)
	}
}

// tokenRecord writes one raw record of stream id with key, as a worker's
// SDK does, and returns the relay's answer.
func tokenRecord(ctx context.Context, nc *nats.Conn, id, key string, end bool, rec semaq.TokenChunk) error {
	subj := semaq.TokenWritePrefix + id + ".c"
	if end {
		subj = semaq.TokenWritePrefix + id + ".end"
	}
	m := &nats.Msg{Subject: subj, Header: nats.Header{semaq.HdrTokenKey: []string{key}}, Data: semaq.AppendTokenChunk(nil, &rec)}
	r, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return err
	}
	if e := replyError(r); e != nil {
		return e
	}
	return nil
}

// replyError is the error a reply carries, nil for a success.
func replyError(m *nats.Msg) error {
	var r struct {
		Error *semaq.APIError `json:"error"`
	}
	if json.Unmarshal(m.Data, &r) == nil && r.Error != nil {
		return r.Error
	}
	return nil
}

func TestPolicyTokenStreamSplitEntityAndStop(t *testing.T) {
	n := newPolicyNode(t, 30*time.Second)
	c, nc, ctx := n.c, n.nc, n.ctx
	for _, r := range []semaq.PolicyRule{
		{Name: "no-pii-out", Streams: []string{semaq.PolicyStreamTokens}, Redact: []string{"email"}},
		{Name: "brand", Streams: []string{semaq.PolicyStreamTokens}, Words: []string{"forbidden phrase"}, OnMatch: semaq.ContentStop},
	} {
		if err := apiCall(ctx, t, nc, semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: r}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const key = "writer-key-0123456789abcdef"
	// An address split over three records is still masked.
	chunks := []string{"Reach me at an", "n@exam", "ple.com today."}
	var off uint64
	for i, ch := range chunks {
		if err := tokenRecord(ctx, nc, "req-a", key, false, semaq.TokenChunk{Seq: uint64(i + 1), Offset: off, N: 1, Text: ch}); err != nil {
			t.Fatal(err)
		}
		off++
	}
	if err := tokenRecord(ctx, nc, "req-a", key, true, semaq.TokenChunk{Seq: 4, Offset: off, Final: &semaq.TokenFinal{FinishReason: "stop"}}); err != nil {
		t.Fatal(err)
	}
	rd, err := c.ReadTokens(ctx, "req-a")
	if err != nil {
		t.Fatal(err)
	}
	res, err := rd.Collect(ctx)
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Reach me at [EMAIL] today." || res.Final.FinishReason != "stop" {
		t.Fatalf("read %q, finish %q", res.Text, res.Final.FinishReason)
	}

	// A phrase split over records stops the stream before it.
	for i, ch := range []string{"This is a forb", "idden phrase indeed"} {
		if err := tokenRecord(ctx, nc, "req-b", key, false, semaq.TokenChunk{Seq: uint64(i + 1), Offset: uint64(i), N: 1, Text: ch}); err != nil {
			t.Fatal(err)
		}
	}
	err = tokenRecord(ctx, nc, "req-b", key, false, semaq.TokenChunk{Seq: 4, Offset: 2, N: 1, Text: " more"})
	if !errors.Is(err, semaq.ErrPolicy) {
		t.Fatalf("a record after the stop: %v", err)
	}
	rd, err = c.ReadTokens(ctx, "req-b")
	if err != nil {
		t.Fatal(err)
	}
	res, err = rd.Collect(ctx)
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "This is a " || res.Final.FinishReason != semaq.FinishContentFilter {
		t.Fatalf("read %q, finish %q", res.Text, res.Final.FinishReason)
	}
}

// What a rule finds never reaches the node's log (at debug level, where
// refusals are logged), its metric labels or the publisher's refusal;
// the metrics count it by rule, type and action.
func TestPolicyKeepsValuesOutOfLogsAndMetrics(t *testing.T) {
	var logs logtest.Buffer
	op, err := operator.New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP, cfg.LogLevel = t.TempDir(), "127.0.0.1:0", "", "debug"
	s, err := broker.New(cfg, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), op.Option())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	c := brokertest.Connect(t, s)
	nc, err := op.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	brokertest.AddStream(t, c, "DEMO", "demo.>")
	for _, r := range []semaq.PolicyRule{
		{Name: "mask-in", Subjects: []string{"demo.>"}, Redact: []string{"email", "secret"}, Actions: map[string]string{"secret": semaq.PIIBlock}},
		{Name: "mask-out", Streams: []string{semaq.PolicyStreamTokens}, Redact: []string{"phone"}},
	} {
		if err := apiCall(ctx, t, nc, semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: r}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const email, key, phone = "zed.private@example.org", "AKIAZ7PLQ2MXR4TN8VWK", "+44 20 7946 0958"
	if _, err := c.Publish(ctx, "demo.in", []byte(`{"q":"`+email+`"}`)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Publish(ctx, "demo.in", []byte(`{"q":"key `+key+`"}`))
	if !errors.Is(err, semaq.ErrPIIBlocked) || strings.Contains(err.Error(), key) {
		t.Fatalf("blocked: %v", err)
	}
	const wkey = "writer-key-0123456789abcdef"
	if err := tokenRecord(ctx, nc, "req-l", wkey, false, semaq.TokenChunk{Seq: 1, N: 1, Text: "call " + phone + " now"}); err != nil {
		t.Fatal(err)
	}
	if err := tokenRecord(ctx, nc, "req-l", wkey, true, semaq.TokenChunk{Seq: 2, Offset: 1, Final: &semaq.TokenFinal{FinishReason: "stop"}}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	exposition := rec.Body.String()
	for _, v := range []string{email, key, phone, "zed.private", "AKIAZ7"} {
		if strings.Contains(logs.String(), v) {
			t.Errorf("the log holds %q", v)
		}
		if strings.Contains(exposition, v) {
			t.Errorf("the metrics hold %q", v)
		}
	}
	for _, want := range []string{
		`semaq_policy_findings_total{policy="mask-in",stage="ingress",type="email"} 1`,
		`semaq_policy_actions_total{action="block",policy="mask-in",stage="ingress"} 1`,
		`semaq_policy_findings_total{policy="mask-out",stage="tokens",type="phone"} 1`,
	} {
		if !strings.Contains(exposition, want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
	if logs.Lines("level=DEBUG") == 0 {
		t.Fatal("nothing was logged at debug level: the test saw no log to search")
	}
}
