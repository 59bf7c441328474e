package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/logtest"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

func auditList(t *testing.T, c *client.Client, r semaq.AuditListRequest) *semaq.AuditListResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Audit(ctx, r)
	if err != nil {
		t.Fatalf("audit list %+v: %v", r, err)
	}
	return resp
}

// field decodes one top-level field of a record's before or after.
func field(t *testing.T, raw json.RawMessage, name string) any {
	t.Helper()
	if raw == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return m[name]
}

// Every kind of admin change leaves exactly one record, in order, with
// what it changed before and after; a refused one leaves one too.
func TestAuditRecordsEveryChange(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const schemaText = `{"type":"object","properties":{"id":{"type":"string"}}}`
	steps := []struct {
		op, target, outcome string
		do                  func() error
	}{
		{semaq.AuditOpStreamCreate, "ORDERS", semaq.AuditOK, func() error {
			_, err := c.AddStream(ctx, semaq.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
			return err
		}},
		{semaq.AuditOpStreamCreate, "ORDERS", semaq.AuditRefused, func() error {
			_, err := c.AddStream(ctx, semaq.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
			if !errors.Is(err, semaq.ErrStreamExists) {
				return errors.New("the second create was not refused")
			}
			return nil
		}},
		{semaq.AuditOpQueueCreate, "JOBS", semaq.AuditOK, func() error {
			_, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "JOBS", Subjects: []string{"jobs.>"}})
			return err
		}},
		{semaq.AuditOpSchemaRegister, "orders-value", semaq.AuditOK, func() error {
			_, _, err := c.RegisterSchema(ctx, "orders-value", schemaText)
			return err
		}},
		{semaq.AuditOpSchemaConfigSet, "orders-value", semaq.AuditOK, func() error {
			_, err := c.SetSchemaCompatibility(ctx, "orders-value", "FULL")
			return err
		}},
		{semaq.AuditOpSchemaBind, "orders.>", semaq.AuditOK, func() error { return c.BindSchema(ctx, "orders.>", "orders-value") }},
		{semaq.AuditOpRouteAdd, "to-orders", semaq.AuditOK, func() error {
			_, err := c.AddRoute(ctx, semaq.Route{Name: "to-orders", Subject: "in.>", To: "orders.routed"})
			return err
		}},
		{semaq.AuditOpRouteDelete, "to-orders", semaq.AuditOK, func() error { return c.DeleteRoute(ctx, "to-orders") }},
		{semaq.AuditOpSchemaUnbind, "orders.>", semaq.AuditOK, func() error { return c.UnbindSchema(ctx, "orders.>") }},
		{semaq.AuditOpDLQPurge, "ORDERS", semaq.AuditOK, func() error { _, err := c.PurgeDeadLetters(ctx, "ORDERS", ""); return err }},
		{semaq.AuditOpDLQReplay, "seq 99", semaq.AuditRefused, func() error {
			if _, err := c.Replay(ctx, 99); err == nil {
				return errors.New("replaying a dead letter that does not exist worked")
			}
			return nil
		}},
		{semaq.AuditOpQueueDelete, "JOBS", semaq.AuditOK, func() error { return c.DeleteQueue(ctx, "JOBS") }},
		{semaq.AuditOpSchemaDelete, "orders-value", semaq.AuditOK, func() error {
			_, err := c.DeleteSchema(ctx, "orders-value", "", false)
			return err
		}},
		{semaq.AuditOpStreamDelete, "ORDERS", semaq.AuditOK, func() error { return c.DeleteStream(ctx, "ORDERS") }},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("step %d, %s %s: %v", i, st.op, st.target, err)
		}
		// Exactly one record per change, written before the answer.
		recs := auditList(t, c, semaq.AuditListRequest{Limit: semaq.AuditListMax}).Records
		if len(recs) != i+1 {
			t.Fatalf("after step %d (%s %s) the audit holds %d records, want %d", i, st.op, st.target, len(recs), i+1)
		}
		r := recs[i]
		if r.Op != st.op || r.Target != st.target || r.Outcome != st.outcome {
			t.Fatalf("step %d: record %s %q %s (%s), want %s %q %s", i, r.Op, r.Target, r.Outcome, r.Error, st.op, st.target, st.outcome)
		}
		if r.Principal.Who != "anonymous" || r.Time.IsZero() || r.Node == "" || r.Seq == 0 {
			t.Errorf("step %d: principal %+v, time %v, node %q, seq %d", i, r.Principal, r.Time, r.Node, r.Seq)
		}
		if (r.Outcome == semaq.AuditRefused) != (r.Error != "") {
			t.Errorf("step %d: outcome %s with error %q", i, r.Outcome, r.Error)
		}
	}
	recs := auditList(t, c, semaq.AuditListRequest{}).Records
	check := func(i int, what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("record %d (%s %s): %s; before %s, after %s", i, recs[i].Op, recs[i].Target, what, recs[i].Before, recs[i].After)
		}
	}
	// stream.create: nothing before, the configuration after.
	subjects, _ := field(t, recs[0].After, "subjects").([]any)
	check(0, "before/after", recs[0].Before == nil && field(t, recs[0].After, "name") == "ORDERS" &&
		len(subjects) == 1 && subjects[0] == "orders.>")
	// The refused create: the stream as it was and stayed, and why.
	check(1, "refusal", field(t, recs[1].Before, "name") == "ORDERS" && string(recs[1].After) == string(recs[1].Before) &&
		strings.Contains(recs[1].Error, "already exists"))
	check(2, "queue after", recs[2].Before == nil && field(t, recs[2].After, "name") == "JOBS")
	check(3, "schema after", recs[3].Before == nil && strings.Contains(string(recs[3].After), `"versions":[1]`))
	check(4, "compatibility", field(t, recs[4].Before, "compatibility") == "BACKWARD" && field(t, recs[4].After, "compatibility") == "FULL")
	check(5, "bind", recs[5].Before == nil && field(t, recs[5].After, "subject") == "orders-value")
	check(6, "route add", recs[6].Before == nil && field(t, recs[6].After, "to") == "orders.routed")
	check(7, "route delete", field(t, recs[7].Before, "to") == "orders.routed" && recs[7].After == nil)
	check(8, "unbind", field(t, recs[8].Before, "pattern") == "orders.>" && recs[8].After == nil)
	check(9, "purge", field(t, recs[9].After, "purged") == float64(0))
	check(11, "queue delete", field(t, recs[11].Before, "name") == "JOBS" && recs[11].After == nil)
	check(12, "schema delete", recs[12].Before != nil && recs[12].After == nil)
	check(13, "stream delete", field(t, recs[13].Before, "name") == "ORDERS" && recs[13].After == nil)
	// Reads are not changes: listing did not add records.
	if n := len(auditList(t, c, semaq.AuditListRequest{}).Records); n != len(steps) {
		t.Fatalf("%d records after listing, want %d", n, len(steps))
	}
}

func TestAuditListFilters(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.AddStream(t, c, "A", "a.>")
	brokertest.AddStream(t, c, "B", "b.>")
	if err := c.DeleteStream(ctx, "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "r", Subject: "x.>", To: "b.x"}); err != nil {
		t.Fatal(err)
	}
	count := func(r semaq.AuditListRequest) int { t.Helper(); return len(auditList(t, c, r).Records) }
	for _, tc := range []struct {
		name string
		req  semaq.AuditListRequest
		want int
	}{
		{"all", semaq.AuditListRequest{}, 4},
		{"one op", semaq.AuditListRequest{Op: semaq.AuditOpStreamCreate}, 2},
		{"a family", semaq.AuditListRequest{Op: "stream"}, 3},
		{"another family", semaq.AuditListRequest{Op: "route"}, 1},
		{"a principal", semaq.AuditListRequest{User: "anonymous"}, 4},
		{"another principal", semaq.AuditListRequest{User: "alice"}, 0},
		{"since the future", semaq.AuditListRequest{Since: time.Now().Add(time.Hour)}, 0},
		{"since the past", semaq.AuditListRequest{Since: time.Now().Add(-time.Hour)}, 4},
		{"op and principal", semaq.AuditListRequest{Op: semaq.AuditOpStreamDelete, User: "anonymous"}, 1},
	} {
		if got := count(tc.req); got != tc.want {
			t.Errorf("%s: %d records, want %d", tc.name, got, tc.want)
		}
	}
	// The newest within the limit, with word of the older ones.
	resp := auditList(t, c, semaq.AuditListRequest{Limit: 2})
	if len(resp.Records) != 2 || !resp.More || resp.Records[0].Op != semaq.AuditOpStreamDelete || resp.Records[1].Op != semaq.AuditOpRouteAdd {
		t.Fatalf("limit 2: %+v", resp)
	}
	for _, bad := range []semaq.AuditListRequest{
		{Limit: semaq.AuditListMax + 1},
		{Limit: -1},
		{Op: "stream.explode"},
		{User: strings.Repeat("u", 300)},
	} {
		_, err := c.Audit(ctx, bad)
		if !errors.Is(err, semaq.ErrBadRequest) {
			t.Errorf("%+v: %v, want a bad request", bad, err)
		}
	}
}

// SQ_AUDIT keeps to its bounds: past audit_max_bytes the oldest records
// go; values past audit.MaxValueBytes are stored as their size and hash.
func TestAuditBounded(t *testing.T) {
	const maxBytes = 1 << 20
	s := brokertest.Start(t, func(c *broker.Config) { c.AuditMaxBytes = maxBytes; c.AuditMaxAge = time.Hour })
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if _, err := c.SetSchemaCompatibility(ctx, "", "NONE"); err != nil {
		t.Fatal(err)
	}
	// Each version's text is just under the value bound: each record
	// holds two of them (before, after), so 40 records overflow 1 MiB.
	text := func(i int, n int) string {
		return `{"type":"object","description":"` + strings.Repeat("x", n) + `","title":"v` + string(rune('A'+i%26)) + strings.Repeat("y", i) + `"}`
	}
	for i := range 40 {
		if _, _, err := c.RegisterSchema(ctx, "big", text(i, audit.MaxValueBytes-400)); err != nil {
			t.Fatalf("register %d: %v", i, err)
		}
	}
	if _, _, err := c.RegisterSchema(ctx, "huge", text(0, 2*audit.MaxValueBytes)); err != nil {
		t.Fatal(err)
	}
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	js, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, reserved.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	info := st.CachedInfo()
	if info.Config.MaxBytes != maxBytes || info.Config.MaxAge != time.Hour || info.Config.Discard != jetstream.DiscardOld {
		t.Fatalf("SQ_AUDIT bounds: %d bytes, %s, %v", info.Config.MaxBytes, info.Config.MaxAge, info.Config.Discard)
	}
	if info.State.Bytes > maxBytes || info.State.FirstSeq <= 2 {
		t.Fatalf("SQ_AUDIT holds %d bytes from seq %d: the oldest records should have gone", info.State.Bytes, info.State.FirstSeq)
	}
	recs := auditList(t, c, semaq.AuditListRequest{Op: semaq.AuditOpSchemaRegister, Limit: semaq.AuditListMax})
	last := recs.Records[len(recs.Records)-1]
	if last.Target != "huge" || field(t, last.After, "latest") != nil || field(t, last.After, "truncated") != true || field(t, last.After, "sha256") == nil {
		t.Fatalf("a value over the bound: %s", last.After)
	}
	if !recs.More && recs.Records[0].Seq == 1 {
		t.Fatal("the first record is still listed")
	}
}

func TestAuditConfigBounds(t *testing.T) {
	for _, tc := range []struct {
		set  func(*broker.Config)
		want string
	}{
		{func(c *broker.Config) { c.AuditMaxAge = time.Second }, "audit_max_age"},
		{func(c *broker.Config) { c.AuditMaxAge = -time.Hour }, "audit_max_age"},
		{func(c *broker.Config) { c.AuditMaxBytes = 1000 }, "audit_max_bytes"},
	} {
		cfg := broker.DefaultConfig()
		tc.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error naming %s", err, tc.want)
		}
	}
}

// The schema registry's REST API writes in process: its changes are
// recorded with door http, refusals with the registry's message; reads
// leave nothing, and the front door's metrics still name each route.
func TestAuditRegistryOverHTTP(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	base := "http://" + s.HTTPAddr()
	do := func(method, path, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		method, path, body string
		code               int
		op, target, out    string
	}{
		{"POST", "/subjects/orders-value/versions", `{"schema":"{\"type\":\"object\"}","schemaType":"JSON"}`, 200, semaq.AuditOpSchemaRegister, "orders-value", semaq.AuditOK},
		{"GET", "/subjects/orders-value/versions", "", 200, "", "", ""},
		{"PUT", "/config/orders-value", `{"compatibility":"FULL"}`, 200, semaq.AuditOpSchemaConfigSet, "orders-value", semaq.AuditOK},
		{"PUT", "/config", `{"compatibility":"NONE"}`, 200, semaq.AuditOpSchemaConfigSet, "", semaq.AuditOK},
		{"POST", "/subjects/orders-value/versions", `{"schema":"{not json","schemaType":"JSON"}`, 422, semaq.AuditOpSchemaRegister, "orders-value", semaq.AuditRefused},
		{"DELETE", "/subjects/orders-value/versions/1", "", 200, semaq.AuditOpSchemaDelete, "orders-value", semaq.AuditOK},
		{"DELETE", "/subjects/nothing-here", "", 404, semaq.AuditOpSchemaDelete, "nothing-here", semaq.AuditRefused},
		{"GET", "/nowhere-in-the-registry", "", 404, "", "", ""},
		{"PATCH", "/subjects/orders-value", "", 405, "", "", ""},
	}
	n := 0
	for i, st := range steps {
		if code := do(st.method, st.path, st.body); code != st.code {
			t.Fatalf("step %d: %s %s: %d, want %d", i, st.method, st.path, code, st.code)
		}
		recs := auditList(t, c, semaq.AuditListRequest{}).Records
		if st.op == "" {
			if len(recs) != n {
				t.Fatalf("step %d: %s %s left a record", i, st.method, st.path)
			}
			continue
		}
		n++
		if len(recs) != n {
			t.Fatalf("step %d: %d records, want %d", i, len(recs), n)
		}
		r := recs[n-1]
		if r.Op != st.op || r.Target != st.target || r.Outcome != st.out || r.Door != "http" || r.Principal.Who != "anonymous" {
			t.Fatalf("step %d: record %+v", i, r)
		}
		if st.out == semaq.AuditRefused && (r.Error == "" || strings.HasPrefix(r.Error, "HTTP ")) {
			t.Errorf("step %d: the registry's message is not recorded: %q", i, r.Error)
		}
	}
	recs := auditList(t, c, semaq.AuditListRequest{Op: semaq.AuditOpSchemaConfigSet}).Records
	if field(t, recs[0].Before, "compatibility") != "BACKWARD" || field(t, recs[0].After, "compatibility") != "FULL" {
		t.Errorf("config set over HTTP: before %s, after %s", recs[0].Before, recs[0].After)
	}
	mf, err := s.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	for _, f := range mf {
		if f.GetName() != "semaq_http_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" {
					routes[l.GetValue()] = true
				}
			}
		}
	}
	for _, want := range []string{"POST /subjects/{subject}/versions", "GET /subjects/{subject}/versions", "PUT /config/{subject}", "DELETE /subjects/{subject}"} {
		if !routes[want] {
			t.Errorf("semaq_http_requests_total has no route %q: %v", want, routes)
		}
	}
}

// A record that cannot be written does not undo the change: the change
// is answered as made, the record goes to the log at error level, whole,
// and semaq_audit_write_failures_total counts it.
func TestAuditWriteFailureIsLoggedAndCounted(t *testing.T) {
	var logs logtest.Buffer
	op, err := operator.New()
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = t.TempDir(), "127.0.0.1:0", ""
	s, err := broker.New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), op.Option())
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
	brokertest.AddStream(t, c, "KEPT", "kept.>")
	if got := (counter(t, s, "semaq_audit_records_total", "ok")); got != 1 {
		t.Fatalf("semaq_audit_records_total{outcome=ok} = %v, want 1", got)
	}
	// JetStream loses the audit stream behind the broker's back.
	nc, err := op.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, reserved.AuditStream); err != nil {
		t.Fatal(err)
	}
	brokertest.AddStream(t, c, "UNRECORDED", "unrecorded.>")
	if _, err := c.StreamInfo(ctx, "UNRECORDED"); err != nil {
		t.Fatalf("the change did not stand: %v", err)
	}
	if got := (counter(t, s, "semaq_audit_write_failures_total", "")); got != 1 {
		t.Fatalf("semaq_audit_write_failures_total = %v, want 1", got)
	}
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "could not be stored") {
			line = l
		}
	}
	for _, want := range []string{"level=ERROR", "op=stream.create", "target=UNRECORDED", "principal=anonymous", "unrecorded.>"} {
		if !strings.Contains(line, want) {
			t.Errorf("the error line lacks %q: %s", want, line)
		}
	}
}

// counter is the value of counter family name with label outcome (every
// series when outcome is "").
func counter(t *testing.T, s *broker.Server, name, outcome string) float64 {
	t.Helper()
	mf, err := s.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, f := range mf {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := outcome == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "outcome" && l.GetValue() == outcome)
			}
			if match {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// GET /api/v1/audit is $SQ.API.AUDIT.LIST over HTTP, its filters as query
// parameters.
func TestAuditOverHTTP(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "A", "a.>")
	brokertest.AddStream(t, c, "B", "b.>")
	get := func(query string) (int, semaq.AuditListResponse) {
		t.Helper()
		resp, err := http.Get("http://" + s.HTTPAddr() + "/api/v1/audit" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out semaq.AuditListResponse
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, out
	}
	if code, out := get("?op=stream.create&since=1h&user=anonymous&limit=1"); code != 200 || len(out.Records) != 1 || out.Records[0].Target != "B" || !out.More {
		t.Fatalf("%d %+v", code, out)
	}
	if code, out := get(""); code != 200 || len(out.Records) != 2 {
		t.Fatalf("%d %+v", code, out)
	}
	for _, q := range []string{"?limit=x", "?limit=5000", "?since=yesterday", "?since=-1h", "?op=nothing"} {
		if code, _ := get(q); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
}
