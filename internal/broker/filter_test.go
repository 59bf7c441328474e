package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// publishConfidences publishes n messages {"i": i, "confidence": i/n}.
func publishConfidences(t *testing.T, c *client.Client, subject string, n int) {
	t.Helper()
	for i := range n {
		publish(t, c, subject, fmt.Sprintf(`{"i": %d, "confidence": %g}`, i, float64(i)/float64(n)))
	}
}

type confMsg struct {
	I          int     `json:"i"`
	Confidence float64 `json:"confidence"`
}

func decodeConf(t *testing.T, m *client.Msg) confMsg {
	t.Helper()
	var v confMsg
	if err := json.Unmarshal(m.Data, &v); err != nil {
		t.Fatalf("seq %d: %v", m.Seq, err)
	}
	return v
}

func nextMsg(t *testing.T, sub *client.Subscription) *client.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return m
}

// waitTotals waits until the broker's filters have evaluated n messages.
func waitTotals(t *testing.T, s *broker.Server, n uint64) semaq.FilterStats {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st := broker.FilterTotals(s)
		if st.Matched+st.Skipped >= n {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("filters evaluated %d of %d messages", st.Matched+st.Skipped, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expectNone checks that nothing more is delivered once the filter has seen
// every message.
func expectNone(t *testing.T, sub *client.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if m, err := sub.Next(ctx); err == nil {
		t.Fatalf("unexpected message seq %d: %s", m.Seq, m.Data)
	}
}

func TestFilterDeliversOnlyMatchesInOrder(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	publishConfidences(t, c, "ai.scores", 200)

	ctx := context.Background()
	sub, err := c.Subscribe(ctx, "ai.scores", client.WithFilter("payload.confidence > 0.85"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := 171; want < 200; want++ {
		m := nextMsg(t, sub)
		if v := decodeConf(t, m); v.I != want || v.Confidence <= 0.85 {
			t.Fatalf("got i=%d confidence=%g, want i=%d", v.I, v.Confidence, want)
		}
		if m.Subject != "ai.scores" || m.Stream != "AI" || m.Seq != uint64(want+1) {
			t.Fatalf("got subject %s stream %s seq %d", m.Subject, m.Stream, m.Seq)
		}
		if err := m.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := waitTotals(t, s, 200)
	if st.Matched != 29 || st.Skipped != 171 || st.Errors != 0 {
		t.Errorf("stats %+v, want 29 matched, 171 skipped", st)
	}
	expectNone(t, sub)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := broker.FilterCount(s); n != 0 {
		t.Errorf("%d filters still running after close", n)
	}
}

func TestFilterRuntimeErrorIsNonMatch(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	for _, body := range []string{"not json", `{"confidence": "high"}`, `{}`, `{"confidence": 0.9}`, `{"confidence": 0.1}`} {
		publish(t, c, "ai.scores", body)
	}
	sub, err := c.Subscribe(context.Background(), "ai.scores", client.WithFilter("payload.confidence > 0.85"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if m := nextMsg(t, sub); string(m.Data) != `{"confidence": 0.9}` {
		t.Fatalf("got %s", m.Data)
	}
	st := waitTotals(t, s, 5)
	if st.Matched != 1 || st.Skipped != 4 || st.Errors != 3 {
		t.Errorf("stats %+v, want 1 matched, 4 skipped, 3 errors", st)
	}
	// {} lacks the field; a string is a type mismatch, "not json" no JSON.
	if st.MissingField != 1 {
		t.Errorf("stats %+v, want 1 missing a field", st)
	}
	expectNone(t, sub)
}

func TestFilterBadExpression(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	for _, tc := range []struct{ expr, want string }{
		{"payload.confidence >", "1:"},
		{"modle == 'x'", "did you mean"},
		{"priority + 1", "bool"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			_, err := c.Subscribe(context.Background(), "ai.scores", client.WithFilter(tc.expr))
			if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a bad request mentioning %q", err, tc.want)
			}
		})
	}
	if n := broker.FilterCount(s); n != 0 {
		t.Errorf("%d filters running", n)
	}
	if _, err := c.Subscribe(context.Background(), "nowhere.x", client.WithFilter("true")); !errors.Is(err, semaq.ErrNoStream) {
		t.Errorf("no stream: err = %v", err)
	}
}

func TestFilterDeliverSubjectReserved(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	err := apiRequestErr(c, semaq.APIFilterStart, semaq.FilterStartRequest{
		Subject: "ai.x", Filter: "true", DeliverSubject: reserved.StoragePrefix + "ai.x",
	})
	if !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("err = %v, want bad request", err)
	}
}

// A filtered durable whose client dies gets its unacked matches again, and
// keeps its filter.
func TestFilterDurableRedeliversAfterClientDies(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	publishConfidences(t, c, "ai.scores", 200)

	victim := brokertest.Connect(t, s)
	sub, err := victim.Subscribe(context.Background(), "ai.scores",
		client.WithFilter("payload.confidence > 0.85"), client.WithDurable("picky"), client.WithAckWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for want := 171; want < 176; want++ {
		m := nextMsg(t, sub)
		if v := decodeConf(t, m); v.I != want {
			t.Fatalf("got i=%d, want %d", v.I, want)
		}
		if want < 173 {
			if err := m.Ack(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
	victim.Close() // crash: 173, 174, 175 (and whatever was in flight) are unacked
	t.Cleanup(func() { _ = sub.Close() })

	if _, err := c.Subscribe(context.Background(), "ai.scores", client.WithDurable("picky"), client.WithFilter("true")); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("durable with another filter: err = %v", err)
	}
	// No WithFilter: the durable resumes with its own.
	again, err := c.Subscribe(context.Background(), "ai.scores", client.WithDurable("picky"))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for want := 173; want < 200; want++ {
		m := nextMsg(t, again)
		if v := decodeConf(t, m); v.I != want {
			t.Fatalf("got i=%d, want %d", v.I, want)
		}
		if want < 176 && m.NumDelivered < 2 {
			t.Errorf("i=%d delivered %d times, want a redelivery", want, m.NumDelivered)
		}
		if err := m.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	expectNone(t, again)
}

// A filtered durable survives a broker restart with its position and filter.
func TestFilterDurableSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	onDir := func(cfg *broker.Config) { cfg.DataDir = dir }
	s1 := brokertest.Start(t, onDir)
	c1 := brokertest.Connect(t, s1)
	addStream(t, c1, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	publishConfidences(t, c1, "ai.scores", 200)
	sub, err := c1.Subscribe(context.Background(), "ai.scores",
		client.WithFilter("payload.confidence > 0.85"), client.WithDurable("keeper"), client.WithAckWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for want := 171; want < 181; want++ {
		m := nextMsg(t, sub)
		if v := decodeConf(t, m); v.I != want {
			t.Fatalf("got i=%d, want %d", v.I, want)
		}
		if err := m.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The matches fetched but not acked (i >= 181) are redelivered once
	// their ack wait passes: a nak is not kept across a restart.
	s2 := brokertest.Start(t, onDir)
	c2 := brokertest.Connect(t, s2)
	again, err := c2.Subscribe(context.Background(), "ai.scores", client.WithDurable("keeper"))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for want := 181; want < 200; want++ {
		m := nextMsg(t, again)
		if v := decodeConf(t, m); v.I != want {
			t.Fatalf("got i=%d, want %d", v.I, want)
		}
		if err := m.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	expectNone(t, again)
}

// A filter whose client stops pinging ends, and its ephemeral consumer is
// deleted.
func TestFilterEndsWhenClientGone(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: waits out the filter's missed pings; runs without -short")
	}
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	gone := brokertest.Connect(t, s)
	sub, err := gone.Subscribe(context.Background(), "ai.scores", client.WithFilter("true"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	if n := broker.FilterCount(s); n != 1 {
		t.Fatalf("%d filters running, want 1", n)
	}
	gone.Close()
	// The pump leaves the table first, then drains and deletes its consumer.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.StreamInfo(context.Background(), "AI")
		if err != nil {
			t.Fatal(err)
		}
		if broker.FilterCount(s) == 0 && info.State.ConsumerCount == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("20s after the client went away: %d filters, %d consumers", broker.FilterCount(s), info.State.ConsumerCount)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A misspelled payload field matches nothing. With a JSON schema bound to
// the subject, START warns about a field the schema does not declare and
// refuses one a closed schema (additionalProperties: false) never allows;
// in any case the stats count the messages that lacked the field.
func TestFilterSchemaFieldCheck(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	register := func(subject, pattern, schema string) {
		t.Helper()
		if _, _, err := c.RegisterSchema(ctx, subject, schema); err != nil {
			t.Fatal(err)
		}
		if err := c.BindSchema(ctx, pattern, subject); err != nil {
			t.Fatal(err)
		}
	}
	register("scores-value", "ai.scores", `{"type":"object","properties":{"i":{"type":"integer"},"confidence":{"type":"number"},"meta":{"type":"object","properties":{"model":{"type":"string"}}}}}`)
	register("closed-value", "ai.closed", `{"type":"object","properties":{"i":{"type":"integer"},"confidence":{"type":"number"}},"additionalProperties":false}`)
	publishConfidences(t, c, "ai.scores", 20)

	sub, err := c.Subscribe(ctx, "ai.scores", client.WithFilter("payload.confidance > 0.8"))
	if err != nil {
		t.Fatal(err)
	}
	w := sub.FilterWarnings()
	if len(w) != 1 || !strings.Contains(w[0], `payload.confidance`) || !strings.Contains(w[0], `did you mean "confidence"?`) ||
		!strings.Contains(w[0], "scores-value") {
		t.Errorf("warnings %q, want one naming payload.confidance, the schema and confidence", w)
	}
	st := waitTotals(t, s, 20)
	if st.Matched != 0 || st.MissingField != 20 {
		t.Errorf("stats %+v, want 0 matched and 20 missing the field", st)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if final, ok := sub.FilterStats(); !ok || final.MissingField != 20 || final.Skipped != 20 {
		t.Errorf("final stats %+v (reported %v), want 20 skipped and missing the field", final, ok)
	}

	for _, tc := range []struct {
		subject, filter string
		warn            string // "" for none
	}{
		{"ai.scores", "payload.confidence > 0.8 && payload.meta.model == 'm'", ""},
		{"ai.scores", "payload.meta.modle == 'm'", `declares no field "modle" in payload.meta (did you mean "model"?)`},
		{"ai.scores", "payload.confidence.value > 1", "makes payload.confidence a number"},
		{"ai.closed", "has(payload.confidance)", "allows no others"}, // a presence test still evaluates
		{"ai.other", "payload.anything > 1", ""},                     // no schema bound
	} {
		sub, err := c.Subscribe(ctx, tc.subject, client.WithFilter(tc.filter))
		if err != nil {
			t.Errorf("%s: %v", tc.filter, err)
			continue
		}
		w := sub.FilterWarnings()
		switch {
		case tc.warn == "" && len(w) != 0:
			t.Errorf("%s: warnings %q, want none", tc.filter, w)
		case tc.warn != "" && (len(w) != 1 || !strings.Contains(w[0], tc.warn)):
			t.Errorf("%s: warnings %q, want one containing %q", tc.filter, w, tc.warn)
		}
		_ = sub.Close()
	}

	// A closed schema: the field can never be there, so the filter could
	// never match through it.
	_, err = c.Subscribe(ctx, "ai.closed", client.WithFilter("payload.confidance > 0.8"))
	if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), "could never match") || !strings.Contains(err.Error(), `did you mean "confidence"?`) {
		t.Errorf("closed schema: err %v, want a 400 saying it could never match", err)
	}
	if n := broker.FilterCount(s); n != 0 {
		t.Errorf("%d filters running after the refused start", n)
	}
}
