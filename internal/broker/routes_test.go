package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// routing is a broker with stream AI on ai.> and one stream per GPU
// cluster, so a publish's ack names the target it was stored under.
type routing struct {
	s  *broker.Server
	c  *client.Client
	js jetstream.JetStream
}

func startRouting(t *testing.T, opts ...func(*broker.Config)) *routing {
	t.Helper()
	s := brokertest.Start(t, opts...)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	brokertest.AddStream(t, c, "GPUA", "gpu.cluster-a")
	brokertest.AddStream(t, c, "GPUB", "gpu.cluster-b")
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return &routing{s: s, c: c, js: js}
}

func (r *routing) add(t *testing.T, rt semaq.Route, opts ...client.RouteOption) *semaq.RouteInfo {
	t.Helper()
	info, err := r.c.AddRoute(context.Background(), rt, opts...)
	if err != nil {
		t.Fatalf("add route %s: %v", rt.Name, err)
	}
	return info
}

// pub publishes and returns the stored message.
func (r *routing) pub(t *testing.T, subject string, data string, opts ...client.PublishOption) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	ack, err := r.c.Publish(ctx, subject, []byte(data), opts...)
	if err != nil {
		t.Fatalf("publish to %s: %v", subject, err)
	}
	st, err := r.js.Stream(ctx, ack.Stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatalf("stored message %s/%d: %v", ack.Stream, ack.Sequence, err)
	}
	return m
}

// wantStored checks where a message was stored and its origin header.
func wantStored(t *testing.T, m *jetstream.RawStreamMsg, subject, origin string) {
	t.Helper()
	if m.Subject != subject {
		t.Fatalf("stored on %s, want %s", m.Subject, subject)
	}
	if got := m.Header.Get(semaq.HdrOriginSubject); got != origin {
		t.Fatalf("%s = %q, want %q", semaq.HdrOriginSubject, got, origin)
	}
}

func (r *routing) stats(t *testing.T, name string) semaq.RouteInfo {
	t.Helper()
	routes, err := r.c.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ri := range routes {
		if ri.Name == name {
			return ri
		}
	}
	t.Fatalf("route %s not listed in %+v", name, routes)
	return semaq.RouteInfo{}
}

// The example of the articles SemaQ grew from: requests for llama3 go to
// GPU cluster A, gemma2 to cluster B, the rest stay where they were sent.
func TestRouteByModel(t *testing.T) {
	r := startRouting(t)
	r.add(t, semaq.Route{Name: "llama", Subject: "ai.inference.llm", When: `model.startsWith("llama3")`, To: "gpu.cluster-a"})
	r.add(t, semaq.Route{Name: "gemma", Subject: "ai.inference.llm", When: `model.startsWith("gemma2")`, To: "gpu.cluster-b"})

	m := r.pub(t, "ai.inference.llm", `{"prompt":"hi"}`, client.WithModel("llama3-70b"), client.WithTenant("acme"))
	wantStored(t, m, "gpu.cluster-a", "ai.inference.llm")
	if string(m.Data) != `{"prompt":"hi"}` || m.Header.Get(semaq.HdrTenant) != "acme" || m.Header.Get(semaq.HdrReceived) == "" {
		t.Fatalf("routed message lost its payload or envelope: %q %v", m.Data, m.Header)
	}
	wantStored(t, r.pub(t, "ai.inference.llm", "x", client.WithModel("gemma2-9b")), "gpu.cluster-b", "ai.inference.llm")
	wantStored(t, r.pub(t, "ai.inference.llm", "x", client.WithModel("mistral-7b")), "ai.inference.llm", "")
	wantStored(t, r.pub(t, "ai.inference.llm", "x"), "ai.inference.llm", "")
	// Another subject: the rules' pattern does not match.
	wantStored(t, r.pub(t, "ai.inference.embed", "x", client.WithModel("llama3-70b")), "ai.inference.embed", "")

	if st := r.stats(t, "llama"); st.Stats.Matched != 1 || st.Stats.Errors != 0 || st.Revision == 0 || st.Created.IsZero() {
		t.Fatalf("llama stats = %+v", st)
	}
	if st := r.stats(t, "gemma"); st.Stats.Matched != 1 {
		t.Fatalf("gemma stats = %+v", st)
	}
}

// A rule takes effect on the very next publish after AddRoute returns, and
// stops on the very next one after DeleteRoute returns.
func TestRouteHotReload(t *testing.T) {
	r := startRouting(t)
	ctx := context.Background()
	// The same name each time: a rule added again after its removal.
	for range 3 {
		const name = "hot"
		wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "ai.x", "")
		r.add(t, semaq.Route{Name: name, Subject: "ai.>", When: `model == "llama3"`, To: "gpu.cluster-a"})
		wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "gpu.cluster-a", "ai.x")
		// Replacing takes effect at once too.
		r.add(t, semaq.Route{Name: name, Subject: "ai.>", When: `model == "llama3"`, To: "gpu.cluster-b"}, client.WithReplace())
		wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "gpu.cluster-b", "ai.x")
		if err := r.c.DeleteRoute(ctx, name); err != nil {
			t.Fatal(err)
		}
		wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "ai.x", "")
	}
	if routes, err := r.c.Routes(ctx); err != nil || len(routes) != 0 {
		t.Fatalf("routes after removing all = %v, %v", routes, err)
	}
}

func TestRouteOrder(t *testing.T) {
	r := startRouting(t)
	// Both match every message on ai.req; b has the lower order.
	r.add(t, semaq.Route{Name: "a", Subject: "ai.req", To: "gpu.cluster-a", Order: 10})
	r.add(t, semaq.Route{Name: "b", Subject: "ai.*", To: "gpu.cluster-b", Order: 5})
	wantStored(t, r.pub(t, "ai.req", "x"), "gpu.cluster-b", "ai.req")
	// Same order: by name.
	r.add(t, semaq.Route{Name: "b", Subject: "ai.*", To: "gpu.cluster-b", Order: 10}, client.WithReplace())
	wantStored(t, r.pub(t, "ai.req", "x"), "gpu.cluster-a", "ai.req")
	// A rule that does not match hands over to the next.
	r.add(t, semaq.Route{Name: "first", Subject: ">", When: `tenant == "acme"`, To: "gpu.cluster-b", Order: -1})
	wantStored(t, r.pub(t, "ai.req", "x", client.WithTenant("acme")), "gpu.cluster-b", "ai.req")
	wantStored(t, r.pub(t, "ai.req", "x", client.WithTenant("other")), "gpu.cluster-a", "ai.req")

	routes, err := r.c.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ri := range routes {
		names = append(names, ri.Name)
	}
	if strings.Join(names, ",") != "first,a,b" {
		t.Fatalf("routes listed as %v, want the order they are tried", names)
	}
}

func TestRouteByPayload(t *testing.T) {
	r := startRouting(t)
	r.add(t, semaq.Route{Name: "confident", Subject: "ai.answers.>", When: `payload.confidence > 0.85`, To: "gpu.cluster-a"})
	r.add(t, semaq.Route{Name: "fallback", Subject: "ai.answers.>", To: "gpu.cluster-b", Order: 1})
	wantStored(t, r.pub(t, "ai.answers.x", `{"label":"cat","confidence":0.9}`), "gpu.cluster-a", "ai.answers.x")
	wantStored(t, r.pub(t, "ai.answers.x", `{"label":"cat","confidence":0.5}`), "gpu.cluster-b", "ai.answers.x")

	// A message the expression cannot be evaluated on does not match it,
	// is counted, and the next rule is tried: nothing crashes or is lost.
	wantStored(t, r.pub(t, "ai.answers.x", `not json`), "gpu.cluster-b", "ai.answers.x")
	wantStored(t, r.pub(t, "ai.answers.x", `{"label":"cat"}`), "gpu.cluster-b", "ai.answers.x")
	st := r.stats(t, "confident")
	if st.Stats.Matched != 1 || st.Stats.Errors != 2 || !strings.Contains(st.Stats.LastError, "confidence") {
		t.Fatalf("confident stats = %+v", st.Stats)
	}
	if st := r.stats(t, "fallback"); st.Stats.Matched != 3 || st.Stats.Errors != 0 {
		t.Fatalf("fallback stats = %+v", st.Stats)
	}
}

// A weighted split with a sticky key sends every message with one key to
// one target, in proportion to the weights across keys.
func TestRouteStickySplit(t *testing.T) {
	r := startRouting(t)
	r.add(t, semaq.Route{Name: "ab", Subject: "ai.inference.llm", StickyKey: `headers["X-User"]`,
		Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 70}, {Subject: "gpu.cluster-b", Weight: 30}}})
	ctx := context.Background()
	const keys, rounds = 200, 3
	target := make(map[string]string)
	toA := 0
	for round := range rounds {
		for k := range keys {
			user := fmt.Sprintf("user-%d", k)
			ack, err := r.c.Publish(ctx, "ai.inference.llm", nil, client.WithHeader("X-User", user))
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				target[user] = ack.Stream
				if ack.Stream == "GPUA" {
					toA++
				}
			} else if ack.Stream != target[user] {
				t.Fatalf("round %d: %s went to %s, before to %s", round, user, ack.Stream, target[user])
			}
		}
	}
	if share := float64(toA) / keys; share < 0.5 || share > 0.9 {
		t.Fatalf("%d of %d keys went to the 70%% target", toA, keys)
	}
	st := r.stats(t, "ab")
	if st.Stats.Matched != keys*rounds || st.Stats.Targets["gpu.cluster-a"] != uint64(toA*rounds) ||
		st.Stats.Targets["gpu.cluster-b"] != uint64((keys-toA)*rounds) {
		t.Fatalf("ab stats = %+v (toA %d)", st.Stats, toA)
	}

	// A key that cannot be computed is an evaluation error: not routed.
	wantStored(t, r.pub(t, "ai.inference.llm", "x"), "ai.inference.llm", "")
	if st := r.stats(t, "ab"); st.Stats.Errors != 1 {
		t.Fatalf("missing sticky key: errors = %d", st.Stats.Errors)
	}
}

func TestRouteRandomSplit(t *testing.T) {
	r := startRouting(t)
	r.add(t, semaq.Route{Name: "ab", Subject: "ai.inference.llm",
		Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 7}, {Subject: "gpu.cluster-b", Weight: 3}}})
	ctx := context.Background()
	const n = 200
	toA := 0
	for range n {
		ack, err := r.c.Publish(ctx, "ai.inference.llm", nil)
		if err != nil {
			t.Fatal(err)
		}
		if ack.Stream == "GPUA" {
			toA++
		}
	}
	if share := float64(toA) / n; share < 0.5 || share > 0.9 {
		t.Fatalf("%d of %d messages went to the 70%% target", toA, n)
	}
}

func TestRouteAddRefused(t *testing.T) {
	r := startRouting(t)
	ctx := context.Background()
	split := []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 1}, {Subject: "gpu.cluster-b", Weight: 1}}
	for _, tc := range []struct {
		name  string
		route semaq.Route
		want  string
	}{
		{"undeclared", semaq.Route{Subject: "ai.>", When: `modle == "x"`, To: "gpu.cluster-a"}, "when: 1:1: undeclared reference to 'modle'"},
		{"syntax", semaq.Route{Subject: "ai.>", When: "model ==\n  ", To: "gpu.cluster-a"}, "when: 2:3: syntax error"},
		{"not bool", semaq.Route{Subject: "ai.>", When: `prompt_tokens + 1`, To: "gpu.cluster-a"}, "1:1: a filter must be a bool expression"},
		{"bad key", semaq.Route{Subject: "ai.>", Split: split, StickyKey: `deadline`}, "sticky key: 1:1: a key must be a string or int"},
		{"not captured", semaq.Route{Subject: "ai.>", To: "gpu.cluster-c"}, "no stream captures target subject gpu.cluster-c"},
		{"split not captured", semaq.Route{Subject: "ai.>", Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 1}, {Subject: "gpu.x", Weight: 1}}}, "no stream captures target subject gpu.x"},
		{"to and split", semaq.Route{Subject: "ai.>", To: "gpu.cluster-a", Split: split}, "not both"},
		{"no target", semaq.Route{Subject: "ai.>"}, "no target"},
		{"no subject", semaq.Route{To: "gpu.cluster-a"}, "no subject pattern"},
		{"bad subject", semaq.Route{Subject: "ai..x", To: "gpu.cluster-a"}, "empty token"},
		{"wildcard target", semaq.Route{Subject: "ai.>", To: "gpu.*"}, "wildcard"},
		{"reserved target", semaq.Route{Subject: "ai.>", To: "$SQ.w.gpu"}, "reserved"},
		{"zero weight", semaq.Route{Subject: "ai.>", Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 0}, {Subject: "gpu.cluster-b", Weight: 1}}}, "weight 0"},
		{"negative weight", semaq.Route{Subject: "ai.>", Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: -3}, {Subject: "gpu.cluster-b", Weight: 1}}}, "weight -3"},
		{"huge weight", semaq.Route{Subject: "ai.>", Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: semaq.MaxRouteWeight + 1}, {Subject: "gpu.cluster-b", Weight: 1}}}, "weights are whole numbers"},
		{"one target split", semaq.Route{Subject: "ai.>", Split: split[:1]}, "at least two targets"},
		{"twice", semaq.Route{Subject: "ai.>", Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 1}, {Subject: "gpu.cluster-a", Weight: 1}}}, "given twice"},
		{"key without split", semaq.Route{Subject: "ai.>", To: "gpu.cluster-a", StickyKey: "tenant"}, "needs a split"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.route.Name = "bad"
			_, err := r.c.AddRoute(ctx, tc.route)
			if !errors.Is(err, semaq.ErrBadRoute) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadRoute containing %q", err, tc.want)
			}
		})
	}
	if _, err := r.c.AddRoute(ctx, semaq.Route{Name: "a.b", Subject: "ai.>", To: "gpu.cluster-a"}); !errors.Is(err, semaq.ErrBadRoute) {
		t.Fatalf("name with a dot: %v", err)
	}
	r.add(t, semaq.Route{Name: "ok", Subject: "ai.>", To: "gpu.cluster-a"})
	if _, err := r.c.AddRoute(ctx, semaq.Route{Name: "ok", Subject: "ai.>", To: "gpu.cluster-b"}); !errors.Is(err, semaq.ErrRouteExists) {
		t.Fatalf("add twice: %v", err)
	}
	if err := r.c.DeleteRoute(ctx, "missing"); !errors.Is(err, semaq.ErrRouteNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	routes, err := r.c.Routes(ctx)
	if err != nil || len(routes) != 1 || routes[0].To != "gpu.cluster-a" {
		t.Fatalf("after refused adds: %+v, %v", routes, err)
	}
}

// A target whose stream was deleted after the rule was added refuses the
// publish with an error naming the rule and the target: nothing is
// dropped, nothing hangs.
func TestRouteTargetGone(t *testing.T) {
	r := startRouting(t)
	ctx := context.Background()
	r.add(t, semaq.Route{Name: "llama", Subject: "ai.>", When: `model == "llama3"`, To: "gpu.cluster-a"})
	wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "gpu.cluster-a", "ai.x")
	if err := r.c.DeleteStream(ctx, "GPUA"); err != nil {
		t.Fatal(err)
	}
	_, err := r.c.Publish(ctx, "ai.x", []byte("x"), client.WithModel("llama3"))
	if !errors.Is(err, semaq.ErrNoStream) || !strings.Contains(err.Error(), "route llama") || !strings.Contains(err.Error(), "gpu.cluster-a") {
		t.Fatalf("publish routed to a deleted stream: %v", err)
	}
	// A stock JetStream client gets the same error as a PubAck error.
	if _, err := r.js.PublishMsg(ctx, &nats.Msg{Subject: "ai.x", Header: nats.Header{semaq.HdrModel: {"llama3"}}}); err == nil || !strings.Contains(err.Error(), "gpu.cluster-a") {
		t.Fatalf("stock client publish: %v", err)
	}
	// Unrouted messages are unaffected; a new stream brings the route back.
	wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("gemma2")), "ai.x", "")
	brokertest.AddStream(t, r.c, "GPUA2", "gpu.cluster-a")
	wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "gpu.cluster-a", "ai.x")
}

func TestRouteTest(t *testing.T) {
	r := startRouting(t)
	ctx := context.Background()
	r.add(t, semaq.Route{Name: "confident", Subject: "ai.answers.>", When: `payload.confidence > 0.85`, To: "gpu.cluster-a"})
	r.add(t, semaq.Route{Name: "llama", Subject: "ai.answers.>", When: `model.startsWith("llama3")`, To: "gpu.cluster-b", Order: 1})
	r.add(t, semaq.Route{Name: "embed", Subject: "ai.embed", To: "gpu.cluster-b", Order: 2})
	r.add(t, semaq.Route{Name: "ab", Subject: "ai.answers.>", StickyKey: "tenant", Order: 3,
		Split: []semaq.RouteSplit{{Subject: "gpu.cluster-a", Weight: 1}, {Subject: "gpu.cluster-b", Weight: 1}}})

	res, err := r.c.TestRoute(ctx, "ai.answers.x", []byte("not json"), client.WithModel("llama3-8b"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Route != "llama" || res.Target != "gpu.cluster-b" || res.Stream != "GPUB" || res.Refused != "" || len(res.Trials) != 2 ||
		res.Trials[0].Result != semaq.RouteResultError || !strings.Contains(res.Trials[0].Reason, "not JSON") ||
		res.Trials[1].Result != semaq.RouteResultMatched {
		t.Fatalf("test = %+v", res)
	}
	res, err = r.c.TestRoute(ctx, "ai.answers.x", []byte(`{"confidence":0.1}`), client.WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{semaq.RouteResultFalse, semaq.RouteResultFalse, semaq.RouteResultOtherSubject, semaq.RouteResultMatched}
	if res.Route != "ab" || res.Key != "acme" || len(res.Trials) != len(want) {
		t.Fatalf("test = %+v", res)
	}
	for i, w := range want {
		if res.Trials[i].Result != w {
			t.Fatalf("trial %d = %+v, want %s", i, res.Trials[i], w)
		}
	}
	// The dry run picks what the publish does, and counts nothing.
	ack, err := r.c.Publish(ctx, "ai.answers.x", []byte(`{"confidence":0.1}`), client.WithTenant("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != res.Stream {
		t.Fatalf("published to %s, test said %s", ack.Stream, res.Stream)
	}
	if st := r.stats(t, "confident"); st.Stats.Errors != 0 {
		t.Fatalf("a dry run counted an error: %+v", st.Stats)
	}
	if st := r.stats(t, "ab"); st.Stats.Matched != 1 {
		t.Fatalf("ab matched %d, want 1 (the publish only)", st.Stats.Matched)
	}

	// No rule matches: stored where it was sent.
	if res, err = r.c.TestRoute(ctx, "ai.other", nil); err != nil || res.Route != "" || res.Target != "ai.other" || res.Stream != "AI" || res.Refused != "" {
		t.Fatalf("unrouted test = %+v, %v", res, err)
	}
	// Refusals are reported, not errors.
	if res, err = r.c.TestRoute(ctx, "nowhere.x", nil); err != nil || res.Refused == "" || res.Stream != "" {
		t.Fatalf("uncaptured subject test = %+v, %v", res, err)
	}
	if res, err = r.c.TestRoute(ctx, "ai.answers.x", nil, client.WithHeader("AI-Priority", "urgent")); err != nil ||
		!strings.Contains(res.Refused, "AI-Priority") || len(res.Trials) != 0 {
		t.Fatalf("bad envelope test = %+v, %v", res, err)
	}
	if _, err = r.c.TestRoute(ctx, "ai.*", nil); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("wildcard subject test: %v", err)
	}
}

// Routing into an fsync stream still group-commits: the ack comes after
// the target stream's fsync.
func TestRouteIntoFsyncStream(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	addDurable(t, c, "AI", "ai.>", "interval")
	addDurable(t, c, "SAFE", "safe.audit", "fsync")
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "audit", Subject: "ai.>", When: `tenant == "bank"`, To: "safe.audit"}); err != nil {
		t.Fatal(err)
	}
	before := broker.CommitStats(s, "SAFE")
	for range 5 {
		ack, err := c.Publish(ctx, "ai.req", []byte("x"), client.WithTenant("bank"))
		if err != nil {
			t.Fatal(err)
		}
		if ack.Stream != "SAFE" {
			t.Fatalf("stored in %s", ack.Stream)
		}
	}
	after := broker.CommitStats(s, "SAFE")
	if after == nil || after.Acks != before.Acks+5 || after.Batches <= before.Batches {
		t.Fatalf("commit stats before %+v after %+v: routed messages were not group-committed", before, after)
	}
	// And the other way: an fsync stream's messages routed into an
	// interval stream are acked by JetStream directly.
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "back", Subject: "safe.audit", To: "ai.back"}); err != nil {
		t.Fatal(err)
	}
	// From a client of the node's account: a client without credentials
	// asks through its account's import, whose reply the ack router
	// forwards whatever the stream (docs/security.md).
	nc := nodeConn(t, s)
	routed := broker.AcksRouted(s)
	m, err := nc.Request("safe.audit", []byte("x"), 10*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"stream":"AI"`) {
		t.Fatalf("publish = %v, %v", m, err)
	}
	if broker.AcksRouted(s) != routed {
		t.Fatal("a message routed into an interval stream went through the ack router")
	}
}

// Rules are stored in JetStream: a restarted node routes by them before it
// serves the first publish.
func TestRouteSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	withDir := func(c *broker.Config) { c.DataDir = dir }
	r := startRouting(t, withDir)
	r.add(t, semaq.Route{Name: "llama", Subject: "ai.>", When: `model == "llama3"`, To: "gpu.cluster-a"})
	r.c.Close()
	if err := r.s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := brokertest.Start(t, withDir)
	c := brokertest.Connect(t, s)
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	r = &routing{s: s, c: c, js: js}
	wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "gpu.cluster-a", "ai.x")
}

// A stored rule this node cannot compile (say, written by a newer
// version) is listed with the reason and skipped; the others still route.
func TestRouteStoredRuleNotLoaded(t *testing.T) {
	t.Parallel()
	r := startRouting(t)
	ctx := context.Background()
	nc, err := brokertest.DialOperator(r.s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, reserved.RouteBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "future", []byte(`{"name":"future","subject":"ai.>","when":"gpu_free() > 2","to":"gpu.cluster-b"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "garbage", []byte(`{`)); err != nil {
		t.Fatal(err)
	}
	// Waits for the watcher on the only node; the API's own writes need no
	// such wait.
	deadline := time.Now().Add(10 * time.Second)
	var routes []semaq.RouteInfo
	for len(routes) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("stored rules not listed after 10s: %+v", routes)
		}
		if routes, err = r.c.Routes(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising
	}
	for _, ri := range routes {
		if ri.Error == "" {
			t.Fatalf("rule %s listed as loaded: %+v", ri.Name, ri)
		}
	}
	r.add(t, semaq.Route{Name: "llama", Subject: "ai.>", When: `model == "llama3"`, To: "gpu.cluster-a", Order: 1})
	wantStored(t, r.pub(t, "ai.x", "x", client.WithModel("llama3")), "gpu.cluster-a", "ai.x")
	res, err := r.c.TestRoute(ctx, "ai.x", nil, client.WithModel("llama3"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Trials) != 3 || res.Trials[0].Result != semaq.RouteResultNotLoaded || res.Trials[2].Result != semaq.RouteResultMatched {
		t.Fatalf("test = %+v", res)
	}
	// The public user cannot write the bucket.
	pub, err := jetstream.New(r.c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	pkv, err := pub.KeyValue(ctx, reserved.RouteBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pkv.Put(ctx, "evil", []byte(`{"name":"evil","subject":">","to":"gpu.cluster-a"}`)); err == nil {
		t.Fatal("the public user wrote a route rule straight into the bucket")
	}
}

// BenchmarkIngressRoutes measures async publishes through the ingress with
// no rules and with ten rules that do not match: on other subjects (the
// first-token index skips them), and on the publish subject with a false
// condition (each evaluated).
func BenchmarkIngressRoutes(b *testing.B) {
	for _, bc := range []struct {
		name  string
		rules func(i int) semaq.Route
	}{
		{"rules=0", nil},
		{"rules=10/other-subjects", func(i int) semaq.Route {
			return semaq.Route{Subject: fmt.Sprintf("svc%d.>", i), To: "gpu.cluster-a"}
		}},
		{"rules=10/same-subject-false", func(i int) semaq.Route {
			return semaq.Route{Subject: "ai.inference.llm", When: fmt.Sprintf(`model.startsWith("gemma%d")`, i), To: "gpu.cluster-a"}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := brokertest.Start(b)
			c := brokertest.Connect(b, s)
			ctx := context.Background()
			for _, st := range []semaq.StreamConfig{
				{Name: "AI", Subjects: []string{"ai.>"}, Storage: "memory"},
				{Name: "GPU", Subjects: []string{"gpu.>"}, Storage: "memory"},
			} {
				if _, err := c.AddStream(ctx, st); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 10 {
				if bc.rules == nil {
					break
				}
				r := bc.rules(i)
				r.Name = fmt.Sprintf("r%d", i)
				if _, err := c.AddRoute(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			js, err := jetstream.New(c.Conn(), jetstream.WithPublishAsyncMaxPending(4096))
			if err != nil {
				b.Fatal(err)
			}
			msg := func() *nats.Msg {
				return &nats.Msg{Subject: "ai.inference.llm", Data: make([]byte, 256),
					Header: nats.Header{semaq.HdrModel: {"llama3-70b"}, semaq.HdrTenant: {"acme"}}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := js.PublishMsgAsync(msg()); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				b.Fatal("acks missing")
			}
			b.StopTimer()
			info, err := c.StreamInfo(ctx, "AI")
			if err != nil {
				b.Fatal(err)
			}
			if info.State.Messages != uint64(b.N) {
				b.Fatalf("stored %d of %d (some were routed or lost)", info.State.Messages, b.N)
			}
		})
	}
}
