package metrics_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/semaq/semaq/internal/metrics"
)

// scrape serves m's handler and returns the text exposition.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s: %s", resp.Status, b)
	}
	return string(b)
}

// Lint checks the exposition the way promtool check metrics does (promtool
// runs this same linter).
func Lint(t *testing.T, text string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics
	// None of these may panic: components run without metrics.
	m.Subject("a.>").Accepted()
	m.Subject("a.>").Rejected(metrics.ReasonEnvelope)
	m.Subject("a.>").IngressLatency(time.Millisecond)
	m.Subject("a.>").Delivered(time.Millisecond)
	if m.Subject("a.>").Sample() {
		t.Error("a nil subject samples")
	}
	m.PromptTokens("m", "t", 5)
	m.DeadLetter("S", "terminated")
	m.HTTPRequest("GET /x", 200, time.Millisecond)
	m.Queue("t", 1, "m").Dispatched(time.Second)
	m.Queue("t", 1, "m").Dropped(metrics.DropExpired)
	m.TokenStream("m", "t").Tokens(3)
	m.TokenStream("m", "t").Finished(metrics.StreamDone, 3, time.Millisecond, time.Second)
	m.GatewayRequest("/v1/chat/completions", "m", 200, time.Second)
	m.AddQueueSource(nil)()
	m.SetConsumerSource(nil)
}

func TestIngressFamilies(t *testing.T) {
	m := metrics.New(metrics.Options{Version: "test", NoRuntime: true, LatencySampleEvery: 2})
	s := m.Subject("ai.>")
	if s != m.Subject("ai.>") {
		t.Error("the same pattern gave two handles")
	}
	for range 3 {
		s.Accepted()
	}
	s.Rejected(metrics.ReasonEnvelope)
	s.Rejected(metrics.ReasonSchema)
	s.Rejected("made-up")
	sampled := 0
	for range 10 {
		if s.Sample() {
			sampled++
		}
	}
	if sampled != 5 {
		t.Errorf("sampled %d of 10 with LatencySampleEvery 2, want 5", sampled)
	}
	s.IngressLatency(3 * time.Millisecond)
	s.Delivered(40 * time.Millisecond)
	m.PromptTokens("llama3", "acme", 100)
	m.PromptTokens("llama3", "acme", 3000)
	m.PromptTokens("llama3", "", 1)
	m.PromptTokens("llama3", "acme", -1) // not given: not recorded

	if got := mustCounter(t, m, "semaq_ingress_messages_total", `subject="ai.>"`).value(); got != 3 {
		t.Errorf("accepted = %v, want 3", got)
	}
	if got := mustCounter(t, m, "semaq_ingress_rejected_total", `subject="ai.>",reason="envelope"`).value(); got != 1 {
		t.Errorf("envelope rejections = %v, want 1", got)
	}
	text := scrape(t, m)
	for _, want := range []string{
		`semaq_ingress_rejected_total{reason="schema",subject="ai.>"} 1`,
		`semaq_ingress_rejected_total{reason="other",subject="ai.>"} 1`,
		`semaq_ingress_latency_seconds_count{subject="ai.>"} 1`,
		`semaq_delivery_latency_seconds_count{subject="ai.>"} 1`,
		`semaq_prompt_tokens_count{model="llama3",tenant="acme"} 2`,
		`semaq_prompt_tokens_sum{model="llama3",tenant="acme"} 3100`,
		`semaq_prompt_tokens_count{model="llama3",tenant="none"} 1`,
		`semaq_build_info{version="test"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	Lint(t, text)
}

// mustCounter reads one labelled sample from the registry.
func mustCounter(t *testing.T, m *metrics.Metrics, family, labels string) *sampleReader {
	t.Helper()
	return &sampleReader{m: m, family: family, labels: labels}
}

// sampleReader finds, by gathering, the sample whose labels contain every
// pair; a histogram's value is its count.
type sampleReader struct {
	m              *metrics.Metrics
	family, labels string
}

func (r *sampleReader) value() float64 {
	mfs, _ := r.m.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() != r.family {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			for _, kv := range strings.Split(r.labels, ",") {
				k, v, _ := strings.Cut(kv, "=")
				found := false
				for _, lp := range s.GetLabel() {
					if lp.GetName() == k && fmt.Sprintf("%q", lp.GetValue()) == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				return s.GetGauge().GetValue()
			case s.GetHistogram() != nil:
				return float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func TestLabelCaps(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true, MaxTenants: 2, MaxModels: 1, MaxSubjects: 1})
	for _, tenant := range []string{"a", "b", "c", "d", "a"} {
		m.PromptTokens("m1", tenant, 1)
	}
	m.PromptTokens("m2", "a", 1)
	m.Subject("x.>").Accepted()
	m.Subject("y.>").Accepted()

	text := scrape(t, m)
	for _, want := range []string{
		`semaq_prompt_tokens_count{model="m1",tenant="a"} 2`,
		`semaq_prompt_tokens_count{model="m1",tenant="b"} 1`,
		`semaq_prompt_tokens_count{model="m1",tenant="other"} 2`,
		`semaq_prompt_tokens_count{model="other",tenant="a"} 1`,
		`semaq_ingress_messages_total{subject="x.>"} 1`,
		`semaq_ingress_messages_total{subject="other"} 1`,
		`semaq_metrics_label_overflow_total{label="tenant"} 2`,
		`semaq_metrics_label_overflow_total{label="model"} 1`,
		`semaq_metrics_label_overflow_total{label="subject"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	for _, bad := range []string{`tenant="c"`, `tenant="d"`, `model="m2"`, `subject="y.>"`} {
		if strings.Contains(text, bad) {
			t.Errorf("scrape has %s past its cap", bad)
		}
	}
}

type queueSource []metrics.QueueStat

func (q queueSource) QueueStats() []metrics.QueueStat { return q }

func TestQueueFamilies(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	remove := m.AddQueueSource(queueSource{
		{Tenant: "acme", Priority: 1, Model: "llama3", Depth: 3, OldestAge: 2 * time.Second, TokensWaiting: 300},
		{Tenant: "acme", Priority: 1, Model: "llama3", Depth: 2, OldestAge: 5 * time.Second, TokensWaiting: 50},
		{Tenant: "", Priority: 42, Model: "gpt", Depth: 1},
	})
	q := m.Queue("acme", 1, "llama3")
	q.Dispatched(250 * time.Millisecond)
	q.Dispatched(time.Second)
	q.Dropped(metrics.DropExpired)
	q.Dropped("nonsense")

	text := scrape(t, m)
	for _, want := range []string{
		`semaq_queue_messages{model="llama3",priority="1",tenant="acme"} 5`,
		`semaq_queue_oldest_age_seconds{model="llama3",priority="1",tenant="acme"} 5`,
		`semaq_queue_prompt_tokens{model="llama3",priority="1",tenant="acme"} 350`,
		`semaq_queue_messages{model="gpt",priority="other",tenant="none"} 1`,
		`semaq_queue_wait_seconds_count{model="llama3",priority="1",tenant="acme"} 2`,
		`semaq_queue_wait_seconds_sum{model="llama3",priority="1",tenant="acme"} 1.25`,
		`semaq_queue_dispatched_total{model="llama3",priority="1",tenant="acme"} 2`,
		`semaq_queue_dropped_total{model="llama3",priority="1",reason="expired",tenant="acme"} 1`,
		`semaq_queue_dropped_total{model="llama3",priority="1",reason="other",tenant="acme"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	Lint(t, text)
	remove()
	if text := scrape(t, m); strings.Contains(text, "semaq_queue_messages{") {
		t.Error("a removed queue source is still scraped")
	}
}

func TestTokenStreamAndGatewayFamilies(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	ts := m.TokenStream("llama3", "acme")
	ts.FirstToken(200 * time.Millisecond)
	ts.Tokens(10)
	ts.Tokens(11)
	// 21 tokens: the first at 200ms, the last at 2.2s: 20 gaps of 100ms,
	// 21 / 2.2 tokens per second.
	ts.Finished(metrics.StreamDone, 21, 200*time.Millisecond, 2200*time.Millisecond)
	m.TokenStream("llama3", "acme").Finished("bogus", 0, 0, 0)
	m.GatewayRequest("/v1/chat/completions", "llama3", 200, 300*time.Millisecond)
	m.GatewayRequest("/v1/chat/completions", "llama3", 429, time.Millisecond)
	m.GatewayRequest("/v1/chat/completions", "llama3", 1234, time.Millisecond)

	text := scrape(t, m)
	for _, want := range []string{
		`semaq_token_stream_tokens_total{model="llama3",tenant="acme"} 21`,
		`semaq_token_stream_time_to_first_token_seconds_sum{model="llama3",tenant="acme"} 0.2`,
		`semaq_token_stream_time_per_output_token_seconds_sum{model="llama3",tenant="acme"} 0.1`,
		`semaq_token_stream_output_tokens_per_second_count{model="llama3",tenant="acme"} 1`,
		`semaq_token_streams_total{model="llama3",outcome="done",tenant="acme"} 1`,
		`semaq_token_streams_total{model="llama3",outcome="other",tenant="acme"} 1`,
		`semaq_gateway_requests_total{code="200",endpoint="/v1/chat/completions",model="llama3"} 1`,
		`semaq_gateway_requests_total{code="429",endpoint="/v1/chat/completions",model="llama3"} 1`,
		`semaq_gateway_requests_total{code="other",endpoint="/v1/chat/completions",model="llama3"} 1`,
		`semaq_gateway_request_duration_seconds_count{endpoint="/v1/chat/completions",model="llama3"} 3`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if !strings.Contains(text, `semaq_token_stream_output_tokens_per_second_sum{model="llama3",tenant="acme"} 9.54`) {
		t.Errorf("tokens per second is not 21/2.2:\n%s", grep(text, "output_tokens_per_second_sum"))
	}
	Lint(t, text)
}

func TestConsumerFamiliesCapDurablesAndSumEphemerals(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true, MaxConsumers: 2})
	m.SetConsumerSource(func() []metrics.ConsumerStat {
		return []metrics.ConsumerStat{
			{Stream: "AI", Consumer: "small", Durable: true, Pending: 1},
			{Stream: "AI", Consumer: "big", Durable: true, Pending: 100, AckPending: 5, Redelivered: 2},
			{Stream: "AI", Consumer: "mid", Durable: true, Pending: 10},
			{Stream: "AI", Consumer: "eph1", Pending: 3, AckPending: 1},
			{Stream: "AI", Consumer: "eph2", Pending: 4},
		}
	})
	text := scrape(t, m)
	for _, want := range []string{
		`semaq_consumer_pending_messages{consumer="big",stream="AI"} 100`,
		`semaq_consumer_ack_pending_messages{consumer="big",stream="AI"} 5`,
		`semaq_consumer_redelivered_messages{consumer="big",stream="AI"} 2`,
		`semaq_consumer_pending_messages{consumer="mid",stream="AI"} 10`,
		`semaq_consumer_pending_messages{consumer="_ephemeral",stream="AI"} 7`,
		`semaq_consumer_ack_pending_messages{consumer="_ephemeral",stream="AI"} 1`,
		`semaq_consumers_unreported 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if strings.Contains(text, `consumer="small"`) {
		t.Error("the durable with the least pending is reported past the cap")
	}
	Lint(t, text)
}

func TestDeadLetterAndHTTPFamilies(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	m.DeadLetter("AI", "max_deliveries")
	m.DeadLetter("AI", "terminated: bad input")
	m.DeadLetter("AI", "terminated")
	m.DeadLetter("AI", "whatever")
	m.HTTPRequest("POST /api/v1/publish/{subject}", 200, time.Millisecond)
	m.HTTPRequest("", 404, time.Millisecond)
	text := scrape(t, m)
	for _, want := range []string{
		`semaq_dead_letters_total{reason="max_deliveries",stream="AI"} 1`,
		`semaq_dead_letters_total{reason="terminated",stream="AI"} 2`,
		`semaq_dead_letters_total{reason="other",stream="AI"} 1`,
		`semaq_http_requests_total{code="200",route="POST /api/v1/publish/{subject}"} 1`,
		`semaq_http_requests_total{code="404",route="unmatched"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	Lint(t, text)
}

func TestRuntimeCollectorsLint(t *testing.T) {
	m := metrics.New(metrics.Options{Version: "x"})
	text := scrape(t, m)
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total", "semaq_build_info"} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	Lint(t, text)
}

func grep(text, sub string) string {
	var b bytes.Buffer
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// A hot-path record allocates nothing once its handle exists.
func TestHotPathAllocations(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	s := m.Subject("ai.>")
	m.PromptTokens("llama3", "acme", 1)
	model, tenant := string([]byte("llama3")), string([]byte("acme")) // not the interned strings
	if n := testing.AllocsPerRun(1000, func() {
		s.Accepted()
		s.Sample()
		s.IngressLatency(time.Millisecond)
		m.PromptTokens(model, tenant, 10)
	}); n != 0 {
		t.Errorf("%v allocations per message, want 0", n)
	}
}

func BenchmarkIngressRecord(b *testing.B) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	s := m.Subject("ai.>")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Accepted()
			m.PromptTokens("llama3", "acme", 100)
		}
	})
}

// Label values from unvalidated sources are mended, never a panic.
func TestLabelValuesMended(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntime: true})
	m.TokenStream("bad\xebmodel", strings.Repeat("t", 500)).Tokens(1)
	text := scrape(t, m)
	if !strings.Contains(text, `model="bad`+"\uFFFD"+`model"`) || !strings.Contains(text, `tenant="`+strings.Repeat("t", 128)+`"`) {
		t.Errorf("values not mended:\n%s", grep(text, "semaq_token_stream_tokens_total"))
	}
	Lint(t, text)
}
